// A secret's placeholder read from its `placeholderFrom` file (shaped like the credential by whoever
// writes it) instead of derived from the instance's salt, read again with the value at each reload.
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConfig } from "@pi-sandbox/config";
import { placeholderFor, resolveSecrets, secretsProfile } from "../src/daemon/secrets.js";

const SHAPED = "eyJhbGciOiJSUzI1NiJ9.eyJleHAiOjE3MDAwMDAwMDB9.cmFuZG9tLXNpZ25hdHVyZQ";
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-placeholder-"));
  await writeFile(join(dir, "token"), "the-real-token-stays-on-the-host\n");
});
afterAll(() => rm(dir, { recursive: true, force: true }));

const config = (placeholderFrom: string) =>
  parseConfig(
    `version: 1\nnetwork:\n  allowedHosts: [chatgpt.com]\n  secrets:\n` +
      `    TOKEN: { from: 'file:${join(dir, "token")}', hosts: [chatgpt.com], placeholderFrom: '${placeholderFrom}' }\n` +
      `    OTHER: { from: 'file:${join(dir, "token")}', hosts: [chatgpt.com] }\n`,
  );

test("the guest sees the placeholder the file holds, read again at each resolution; others stay derived", async () => {
  const file = join(dir, "TOKEN.placeholder");
  await writeFile(file, `${SHAPED}\n`);
  const first = await resolveSecrets(config(`file:${file}`), { salt: "s", stateRoot: join(dir, "state") });
  expect(first.TOKEN).toMatchObject({ placeholder: SHAPED, value: "the-real-token-stays-on-the-host" });
  expect(first.OTHER!.placeholder).toBe(placeholderFor("s", "OTHER"));
  expect(await secretsProfile(config(`file:${file}`), "s", join(dir, "state"))).toContain(`export TOKEN='${SHAPED}'\n`);

  await writeFile(file, `${SHAPED}x\n`);
  expect(
    (await resolveSecrets(config(`file:${file}`), { salt: "s", stateRoot: join(dir, "state") })).TOKEN!.placeholder,
  ).toBe(`${SHAPED}x`);
});

test.each([
  ["missing", undefined, /does not exist/],
  ["short", "too-short", /not one line of 24 to 4096 visible ASCII/],
  ["spaces", "has spaces in the placeholder text", /not one line of 24 to 4096 visible ASCII/],
])("a %s placeholder file is CONTROLLER_SECRET_UNAVAILABLE, never quoted", async (label, text, message) => {
  const file = join(dir, `${label}.placeholder`);
  if (text !== undefined) await writeFile(file, `${text}\n`);
  const error = await resolveSecrets(config(`file:${file}`), { salt: "s", stateRoot: join(dir, "state") }).catch(
    (e: unknown) => e,
  );
  expect(error).toMatchObject({ code: "CONTROLLER_SECRET_UNAVAILABLE", details: { secret: "TOKEN" } });
  expect((error as Error).message).toMatch(message);
  if (text !== undefined) expect((error as Error).message).not.toContain(text);
});

test("a placeholder file in the home's credentials is refused to every caller, and never reaches the guest's profile", async () => {
  const home = join(dir, "home");
  await mkdir(join(home, ".ssh"), { recursive: true });
  await writeFile(join(home, ".ssh", "id_ed25519"), `${SHAPED}\n`);
  const options = { salt: "s", stateRoot: join(dir, "state"), home };
  const error = await resolveSecrets(config("file:~/.ssh/id_ed25519"), options).catch((e: unknown) => e);
  expect(error).toMatchObject({
    code: "CONTROLLER_HOST_PATH_REFUSED",
    message: expect.stringContaining(`${join(home, ".ssh")}, where credentials and configuration live`),
  });
  expect((error as Error).message).not.toContain(SHAPED);
});
