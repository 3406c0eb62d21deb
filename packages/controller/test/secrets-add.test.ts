// `secrets-add`: more network.secrets on an existing instance's recorded config, checked by the
// sandbox.yaml schema, their hosts added to allowedHosts; taken by the VM at its next start.
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConfig } from "@pi-sandbox/config";
import { StateLayout } from "../src/client/index.js";
import { secretsAdd } from "../src/actions/secrets-add.js";
import { readRecord, writeRecord } from "../src/state/records.js";

let dir: string;
let layout: StateLayout;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-secrets-add-"));
  layout = new StateLayout(join(dir, "state"));
  await layout.ensurePrivate();
  await mkdir(layout.entryDir("instances", "box"), { recursive: true });
  const config = parseConfig(
    "version: 1\nnetwork:\n  allowedHosts: [api.github.com]\n  secrets:\n    GH: { from: 'env:GH', hosts: [api.github.com] }\n",
  );
  await writeRecord(layout, { kind: "instances", name: "box", createdAt: "2026-01-01T00:00:00.000Z", config });
});
afterAll(() => rm(dir, { recursive: true, force: true }));

const run = (secrets: Record<string, Record<string, unknown>>, name = "box") =>
  secretsAdd.run({ action: "secrets-add", name, secrets }, { layout, cwd: dir, env: {}, actions: [] });

test("a new secret is recorded with its host allowed, for the next start; adding it again changes nothing", async () => {
  const token = {
    from: "file:/keys/TOKEN",
    hosts: ["chatgpt.com"],
    placeholderFrom: "file:/keys/TOKEN.placeholder",
  };
  expect(await run({ TOKEN: token, GH: { from: "env:GH", hosts: ["api.github.com"] } })).toEqual({
    added: ["TOKEN"],
    unchanged: ["GH"],
    allowedHostsAdded: ["chatgpt.com"],
    restartNeeded: true,
  });
  const record = await readRecord(layout, "instances", "box");
  expect(record!.config.network.allowedHosts).toEqual(["api.github.com", "chatgpt.com"]);
  expect(record!.config.network.secrets.TOKEN).toEqual(token);
  expect(await run({ TOKEN: token })).toMatchObject({ added: [], unchanged: ["TOKEN"], restartNeeded: false });
  expect(secretsAdd.userOnly).toBe(true); // a model could send any host file anywhere otherwise
});

test("a changed, invalid or unknown declaration is refused and nothing is written", async () => {
  const before = JSON.stringify(await readRecord(layout, "instances", "box"));
  await expect(run({ GH: { from: "env:OTHER", hosts: ["api.github.com"] } })).rejects.toMatchObject({
    code: "CONTROLLER_BAD_INPUT",
    message: expect.stringContaining("already declares secret GH differently"),
  });
  await expect(run({ NEW: { from: "sk-inline-value", hosts: ["a.example.com"] } })).rejects.toMatchObject({
    code: "CONTROLLER_BAD_INPUT",
    message: expect.not.stringContaining("sk-inline-value"),
  });
  await expect(run({ NEW: { from: "env:X", hosts: ["a.example.com"], value: "x" } })).rejects.toMatchObject({
    code: "CONTROLLER_BAD_INPUT",
  });
  await expect(run({ NEW: { from: "env:X", hosts: ["a.example.com"] } }, "nope")).rejects.toMatchObject({
    code: "CONTROLLER_NOT_FOUND",
  });
  expect(JSON.stringify(await readRecord(layout, "instances", "box"))).toBe(before);
});
