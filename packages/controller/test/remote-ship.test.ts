// A sandbox.yaml on its way to another machine: its secrets read here (a relative file: against
// the YAML's directory, env: from this environment) and replaced by variables the call carries,
// its sources kept here without a value, a mount of a directory here and a relative image path
// refused with what to do, and the values read again from the kept sources for a later start.
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConfig } from "@pi-sandbox/config";
import { readSources, rememberSources, sourcesOf } from "../src/remote/secret-sources.js";
import { shipConfig } from "../src/remote/ship-config.js";
import { configDir } from "../src/state/contexts.js";

let dir: string;
let env: NodeJS.ProcessEnv;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "ship-"));
  env = { HOME: dir, XDG_CONFIG_HOME: join(dir, "config"), FROM_ENV: "env-value" };
  await mkdir(join(dir, "project", "keys"), { recursive: true });
  await writeFile(join(dir, "project", "keys", "token"), "file-value\n");
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const yaml = (body: string) => writeFile(join(dir, "project", "sandbox.yaml"), `version: 1\n${body}`);

test("secrets are read here and the text names variables; the sources are kept without a value", async () => {
  await yaml(
    [
      "image: /srv/images/dev # the other machine's path",
      "network:",
      "  allowedHosts: [a.example, b.example]",
      "  secrets:",
      "    A:",
      "      from: file:keys/token",
      "      hosts: [a.example]",
      "    B:",
      "      from: env:FROM_ENV",
      "      hosts: [b.example]",
      "",
    ].join("\n"),
  );
  const shipped = await shipConfig(join(dir, "project", "sandbox.yaml"), "far", env);
  expect(shipped.secrets).toEqual({
    PI_SANDBOX_CONTEXT_SECRET_0: "file-value",
    PI_SANDBOX_CONTEXT_SECRET_1: "env-value",
  });
  expect(shipped.config.name).toBe("sandbox.yaml");
  expect(shipped.config.text).not.toMatch(/file-value|env-value|keys\/token|FROM_ENV/);
  // Still a valid config there, naming the variables and keeping the rest (the comment too).
  const there = parseConfig(shipped.config.text, { sourcePath: "/elsewhere/sandbox.yaml" });
  expect(there.network.secrets.A!.from).toBe("env:PI_SANDBOX_CONTEXT_SECRET_0");
  expect(there.network.secrets.B!.from).toBe("env:PI_SANDBOX_CONTEXT_SECRET_1");
  expect(shipped.config.text).toMatch(/image: \/srv\/images\/dev # the other machine's path/);
  expect(shipped.sources).toEqual({
    PI_SANDBOX_CONTEXT_SECRET_0: `file:${join(dir, "project", "keys", "token")}`,
    PI_SANDBOX_CONTEXT_SECRET_1: "env:FROM_ENV",
  });

  await rememberSources(env, "far", "instances", "demo", shipped.sources);
  const kept = join(configDir(env), "contexts", "far", "instances", "demo.json");
  expect((await stat(kept)).mode & 0o777).toBe(0o600);
  expect(await readFile(kept, "utf8")).not.toMatch(/file-value|env-value/);
  // A later call reads them again; one that cannot be read now is left out.
  await writeFile(join(dir, "project", "keys", "token"), "rotated\n");
  const later = await readSources({ ...env, FROM_ENV: "" }, await sourcesOf(env, "far", "instances", "demo"));
  expect(later).toEqual({ PI_SANDBOX_CONTEXT_SECRET_0: "rotated" });
});

test("a secret that cannot be read here fails before anything is sent", async () => {
  await yaml(
    "network:\n  allowedHosts: [a.example]\n  secrets:\n    A:\n      from: env:MISSING\n      hosts: [a.example]\n",
  );
  await expect(shipConfig(join(dir, "project", "sandbox.yaml"), "far", env)).rejects.toMatchObject({
    code: "CONTROLLER_SECRET_UNAVAILABLE",
    message: expect.stringContaining("env:MISSING"),
  });
});

test("a mount of a directory here, and an image path relative to here, are refused with what to do", async () => {
  await yaml("mounts:\n  - host: ./keys\n    guest: /mnt/keys\n");
  await expect(shipConfig(join(dir, "project", "sandbox.yaml"), "far", env)).rejects.toMatchObject({
    code: "CONTROLLER_CONTEXT_REFUSED",
    message: expect.stringContaining("mounts a directory of this machine"),
    hint: expect.stringContaining("pi-sandbox cp"),
  });
  await yaml("image: ./images/dev\n");
  await expect(shipConfig(join(dir, "project", "sandbox.yaml"), "far", env)).rejects.toMatchObject({
    code: "CONTROLLER_CONTEXT_REFUSED",
    hint: expect.stringContaining("image push"),
  });
});
