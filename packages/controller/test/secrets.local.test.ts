// network.secrets and mounts through the daemon, without QEMU: the daemon's InstanceController
// runs in-process over the local runtime, whose "guest" environment is what Gondolin's would be
// (placeholders) and whose host side keeps the values (`secretValue`). The substitution itself is
// Gondolin's, shown on a real VM in the vm package (secrets.vm.test.ts).
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { mkdirSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { StateLayout } from "../src/client/index.js";
import { formatView } from "../src/actions/kit/text.js";
import { renderHelp } from "../src/client/index.js";
import { inspectEntry, type EntryView } from "../src/state/inspect.js";
import { readRecord } from "../src/state/records.js";
import { createLocalRuntime, type LocalRuntime } from "../src/testing.js";
import { localDaemons, type LocalDaemons, type Loose } from "./support/local-daemon.js";
import type { LocalRuntimeVm } from "../src/testing-runtime.js";
import { secretsProfile } from "../src/daemon/secrets.js";

const ENV_VALUE = "pisb-env-token-3f9a0c1d";
const FILE_VALUE = "pisb-file-token-8e2b7a44";
const ROTATED = "pisb-rotated-token-61c0";
const ENV_VAR = "PISB_TEST_SECRET_SOURCE";

let dir: string;
let layout: StateLayout;
let runtime: LocalRuntime;
let docs: string;
let daemons: LocalDaemons;
const progress: string[] = [];

const yaml = (extra = "") => `version: 1
profile: tiny
diskGiB: 4
network:
  allowedHosts: [api.example.com, '*.npm.example.com']
  secrets:
    API_TOKEN: { from: 'env:${ENV_VAR}', hosts: [api.example.com] }
    NPM_TOKEN: { from: 'file:npm-token', hosts: ['*.npm.example.com'] }
mounts:
  - { host: ./docs, guest: /mnt/docs }
${extra}`;

const realHome = process.env.HOME;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-sec-"));
  layout = new StateLayout(join(dir, "state"));
  await layout.ensurePrivate();
  runtime = createLocalRuntime();
  daemons = localDaemons(layout, runtime);
  docs = join(dir, "docs");
  await mkdir(docs);
  await writeFile(join(dir, "npm-token"), `${FILE_VALUE}\n`);
  await writeFile(join(dir, "sandbox.yaml"), yaml());
  process.env[ENV_VAR] = ENV_VALUE;
  progress.length = 0;
  process.env.HOME = join(`${dir}-home`, "user"); // beside dir: holding dir must not hold it
  await mkdir(process.env.HOME, { recursive: true });
});

afterEach(async () => {
  delete process.env[ENV_VAR];
  if (realHome === undefined) delete process.env.HOME;
  else process.env.HOME = realHome;
  await daemons.close();
  for (const vm of [...runtime.live]) await vm.close();
  await rm(dir, { recursive: true, force: true });
  await rm(`${dir}-home`, { recursive: true, force: true });
});

const call = (action: Loose) => daemons.call(action, progress);

const guestEnv = async (name: string) =>
  (await call({ action: "exec", name, cmd: 'env; printf \'API=%s\\nNPM=%s\\n\' "$API_TOKEN" "$NPM_TOKEN"' }))
    .output as string;

const liveVm = () => [...runtime.live][0] as LocalRuntimeVm;

/** Every byte of the state directory, for "the value is nowhere" checks. */
async function stateBytes(): Promise<string> {
  const files = await readdir(layout.root, { recursive: true, withFileTypes: true });
  const texts = await Promise.all(
    files.filter((f) => f.isFile()).map((f) => readFile(join(f.parentPath, f.name), "latin1").catch(() => "")),
  );
  return texts.join("\n");
}

test("the guest sees stable placeholders, the host holds values read at each start, and nothing records a value", async () => {
  const created = await call({ action: "create", name: "demo", config: join(dir, "sandbox.yaml") });
  expect(created).toMatchObject({
    state: "running",
    secrets: [
      { name: "API_TOKEN", hosts: ["api.example.com"] },
      { name: "NPM_TOKEN", hosts: ["*.npm.example.com"] },
    ],
    mounts: [{ host: docs, guest: "/mnt/docs" }],
  });
  const text = formatView(created as EntryView);
  expect(text).toContain("secret:      API_TOKEN → api.example.com (value kept on the host)\n");
  expect(text).toContain(`mount:       ${docs} → /mnt/docs (read-only)\n`);
  const first = await guestEnv("demo");
  const api = /^API=(PI_SANDBOX_SECRET_[0-9a-f]{40})$/m.exec(first)?.[1];
  const npm = /^NPM=(PI_SANDBOX_SECRET_[0-9a-f]{40})$/m.exec(first)?.[1];
  expect(api && npm && api !== npm).toBeTruthy();
  expect(first).not.toContain(ENV_VALUE);
  expect(first).not.toContain(FILE_VALUE);
  expect(liveVm().secretValue("API_TOKEN")).toBe(ENV_VALUE);
  expect(liveVm().secretValue("NPM_TOKEN")).toBe(FILE_VALUE); // the final line break dropped
  expect(progress).toContain("[boot] secrets kept on the host: API_TOKEN, NPM_TOKEN");
  await call({ action: "stop", name: "demo" });

  // The next start reads the sources again (a rotated token) and keeps the placeholders.
  await writeFile(join(dir, "npm-token"), ROTATED);
  await call({ action: "start", name: "demo" });
  expect(liveVm().secretValue("NPM_TOKEN")).toBe(ROTATED);
  const second = await guestEnv("demo");
  expect(second).toContain(`API=${api}\n`);
  expect(second).toContain(`NPM=${npm}\n`);
  const view = await inspectEntry(layout, "instances", "demo");
  await call({ action: "stop", name: "demo" });

  const everything = [await stateBytes(), JSON.stringify(view), formatView(view), progress.join("\n")].join("\n");
  for (const value of [ENV_VALUE, FILE_VALUE, ROTATED]) expect(everything).not.toContain(value);
});

test("the secrets action reads the sources of a running instance again; the placeholders stay", async () => {
  await call({ action: "create", name: "demo", config: join(dir, "sandbox.yaml") });
  const before = await guestEnv("demo");
  await writeFile(join(dir, "npm-token"), ROTATED);
  expect(await call({ action: "secrets", name: "demo" })).toEqual({
    secrets: [
      { name: "API_TOKEN", hosts: ["api.example.com"] },
      { name: "NPM_TOKEN", hosts: ["*.npm.example.com"] },
    ],
  });
  expect(liveVm().secretValue("NPM_TOKEN")).toBe(ROTATED);
  expect(await guestEnv("demo")).toBe(before);
  // A source that fails changes nothing.
  await rm(join(dir, "npm-token"));
  await expect(call({ action: "secrets", name: "demo" })).rejects.toMatchObject({
    code: "CONTROLLER_SECRET_UNAVAILABLE",
  });
  expect(liveVm().secretValue("NPM_TOKEN")).toBe(ROTATED);

  await call({ action: "stop", name: "demo" });
});

test("a placeholderPrefix starts the placeholder, in exec and the terminal profile", async () => {
  await writeFile(
    join(dir, "sandbox.yaml"),
    yaml().replace("hosts: [api.example.com] }", "hosts: [api.example.com], placeholderPrefix: sk-ant-oat01- }"),
  );
  await call({ action: "create", name: "demo", config: join(dir, "sandbox.yaml") });
  const env = await guestEnv("demo");
  const api = /^API=(sk-ant-oat01-PI_SANDBOX_SECRET_[0-9a-f]{40})$/m.exec(env)?.[1];
  expect(api).toBeDefined();
  expect(env).toMatch(/^NPM=PI_SANDBOX_SECRET_[0-9a-f]{40}$/m);
  expect(liveVm().secretValue("API_TOKEN")).toBe(ENV_VALUE);
  const record = await readRecord(layout, "instances", "demo");
  expect(await secretsProfile(record!.config, record!.secretSalt!, layout.root)).toContain(
    `export API_TOKEN='${api}'\n`,
  );
  await call({ action: "stop", name: "demo" });
});

test("a missing source fails the start before the boot, naming the secret and its source", async () => {
  await call({ action: "create", name: "demo", config: join(dir, "sandbox.yaml") });
  await call({ action: "stop", name: "demo" });
  const boots = runtime.boots;
  delete process.env[ENV_VAR];
  await expect(call({ action: "start", name: "demo" })).rejects.toMatchObject({
    code: "CONTROLLER_SECRET_UNAVAILABLE",
    message: `secret API_TOKEN (from env:${ENV_VAR}): the host environment variable ${ENV_VAR} is not set`,
    hint: expect.stringContaining(`Set ${ENV_VAR}`),
  });
  expect(runtime.boots).toBe(boots);
  process.env[ENV_VAR] = ENV_VALUE;
  await rm(join(dir, "npm-token"));
  await expect(call({ action: "start", name: "demo" })).rejects.toMatchObject({
    code: "CONTROLLER_SECRET_UNAVAILABLE",
    message: `secret NPM_TOKEN (from file:${join(dir, "npm-token")}): ${join(dir, "npm-token")} does not exist`,
  });
  await writeFile(join(dir, "npm-token"), "two\nlines\n");
  await expect(call({ action: "start", name: "demo" })).rejects.toMatchObject({
    code: "CONTROLLER_SECRET_UNAVAILABLE",
    message: expect.stringContaining("holds a line break"),
  });
  const view = await inspectEntry(layout, "instances", "demo");
  expect(view.state).toBe("failed");
  expect(view.errors.map((e) => e.code)).toEqual(["CONTROLLER_SECRET_UNAVAILABLE"]);
  expect(JSON.stringify(view)).not.toContain("lines");
  expect(runtime.boots).toBe(boots);
});

test("a create whose secret is missing leaves nothing behind", async () => {
  delete process.env[ENV_VAR];
  await expect(call({ action: "create", name: "demo", config: join(dir, "sandbox.yaml") })).rejects.toMatchObject({
    code: "CONTROLLER_SECRET_UNAVAILABLE",
    hint: expect.stringContaining("Nothing of demo was kept"),
  });
  expect(await readRecord(layout, "instances", "demo")).toBeUndefined();
});

/** `~/<sub>` in the test's own home (HOME points into the test's directory), created. */
function homeDir(sub: string): string {
  const path = join(process.env.HOME!, sub);
  mkdirSync(path, { recursive: true, mode: 0o700 });
  return path;
}

/** A symlink in the test's directory pointing at `target`. */
function linkTo(target: string): string {
  const link = join(dir, "project-link");
  symlinkSync(target, link);
  return link;
}

test.each([
  ["the root directory", () => "/", /is the host's root directory; it is never mounted/],
  ["the home directory", () => "~", /is or holds the home directory/],
  ["a directory holding the home directory", () => dirname(process.env.HOME!), /is or holds the home directory/],
  ["~/.ssh", () => homeDir(".ssh"), /\.ssh, where credentials and configuration live; it is never mounted/],
  ["a directory inside ~/.config", () => homeDir(".config/gh"), /\.config, where credentials/],
  ["~/.local/share/keyrings", () => homeDir(".local/share/keyrings"), /\.local, where credentials/],
  ["a link in the project to ~/.aws", () => linkTo(homeDir(".aws")), /\.aws, where credentials/],
  ["the state directory", () => layout.root, /is or holds the pi-sandbox state directory/],
  ["a directory holding it", () => dir, /is or holds the pi-sandbox state directory/],
  ["a directory inside it", () => join(layout.root, "instances"), /is or holds the pi-sandbox state directory/],
  // (the test's home and state directory are in it too, which may be what the message names)
  ["the temporary directory", () => tmpdir(), /is or holds/],
  ["/proc", () => "/proc/self", /is in \/proc, the running system's own/],
  ["/run", () => "/run", /is in \/run, the running system's own/],
  ["a missing directory", () => join(dir, "nope"), /does not exist/],
])("a mount of %s is refused before the boot", async (_what, host, message) => {
  await writeFile(join(dir, "m.yaml"), `version: 1\nmounts: [{ host: '${host()}', guest: /mnt/x }]\n`);
  await expect(call({ action: "create", name: "demo", config: join(dir, "m.yaml") })).rejects.toMatchObject({
    code: "CONTROLLER_MOUNT_REFUSED",
    message: expect.stringMatching(message),
  });
  expect(runtime.boots).toBe(0);
});

test("an instance from a template keeps the template's placeholders", async () => {
  await call({ action: "prepare", name: "base", config: join(dir, "sandbox.yaml") });
  await call({ action: "create", name: "copy", template: "base" });
  const placeholder = /^API=(\S+)$/m.exec(await guestEnv("copy"))?.[1];
  await call({ action: "stop", name: "copy" });
  expect((await readRecord(layout, "instances", "copy"))?.secretSalt).toBe(
    (await readRecord(layout, "templates", "base"))?.secretSalt,
  );
  await call({ action: "create", name: "other", config: join(dir, "sandbox.yaml") });
  expect(/^API=(\S+)$/m.exec(await guestEnv("other"))?.[1]).not.toBe(placeholder);
  await call({ action: "stop", name: "other" });
});

test("help documents both keys with an example", () => {
  const help = renderHelp();
  expect(help).toContain(
    "network.secrets: {NAME: {from: env:VAR | file:PATH, hosts: [host], headers?: [name], placeholderPrefix?: text, placeholderFrom?: file:PATH}}",
  );
  expect(help).toContain("into authorization, x-api-key, proxy-authorization or a listed header of HTTPS requests");
  expect(help).toContain("after placeholderPrefix, for a client that tells credentials apart by their start");
  expect(help).toContain("secrets: {GITHUB_TOKEN: {from: env:GITHUB_TOKEN, hosts: [api.github.com]}}");
  expect(help).toContain("mounts: [{host: dir relative to the YAML, guest: /abs/path}]");
});
