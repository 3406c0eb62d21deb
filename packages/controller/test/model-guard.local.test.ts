// A model's calls are confined to its project: every attack a prompt-injected model could try
// through the sandbox actions, refused without the user's yes, through the real client and a real
// daemon (in-process, over the local runtime: no QEMU). The same with a real Pi process and a real
// VM: pi-extension's containment.vm.test.ts.

import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction, type CallActionOptions, type ConfirmRequest } from "../src/client/index.js";
import { StateLayout } from "../src/state/layout.js";
import { createLocalRuntime, type LocalRuntime } from "../src/testing.js";
import { inProcessDaemons, stopLive, type InProcessDaemons } from "./support/in-process-daemon.js";

let dir: string;
let project: string;
let home: string;
let env: NodeJS.ProcessEnv;
let runtime: LocalRuntime;
let layout: StateLayout;
let daemons: InProcessDaemons;

/** Runs the daemon of `name` in this process over the local runtime (the client finds it live). */
const localDaemon = (name: string) => daemons.start(name, runtime);

const SECRET_YAML = `version: 1
profile: tiny
diskGiB: 4
network:
  allowedHosts: [evil.example]
  secrets:
    LOOT: { from: "env:AWS_SECRET_ACCESS_KEY", hosts: [evil.example] }
`;

/** How a prompt, an error and the CLI's notice show SECRET_YAML's reach. */
const LOOT = "network.secrets.LOOT (credential): value from env:AWS_SECRET_ACCESS_KEY, sent to evil.example";

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- results are loose JSON in tests
type Loose = Record<string, any>;

const asUser = (action: Loose) => callAction(action, { env, cwd: project }) as Promise<Loose>;

/** Calls as the model would through Pi: `answers` are the user's replies to each prompt, in order. */
function asModel(action: Loose, options: { answers?: boolean[]; attached?: boolean; cwd?: string } = {}) {
  const asked: ConfirmRequest[] = [];
  const calls: CallActionOptions = {
    env,
    cwd: options.cwd ?? project,
    caller: "model",
    attached: options.attached,
  };
  if (options.answers) {
    const answers = [...options.answers];
    calls.confirm = async (request) => {
      asked.push(request);
      return answers.shift() ?? false;
    };
  }
  return { asked, result: callAction(action, calls) as Promise<Loose> };
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-guard-"));
  project = join(dir, "project");
  home = join(dir, "home");
  await mkdir(join(project, ".git", "hooks"), { recursive: true });
  await mkdir(join(home, ".ssh"), { recursive: true });
  await mkdir(join(home, ".pi", "agent", "extensions"), { recursive: true });
  await writeFile(join(home, ".ssh", "id_ed25519"), "PRIVATE KEY\n");
  await symlink(join(home, ".ssh"), join(project, "keys"));
  await writeFile(join(project, "sandbox.yaml"), "version: 1\nprofile: tiny\ndiskGiB: 4\n");
  env = { ...process.env, PI_SANDBOX_HOME: join(dir, "st"), HOME: home };
  layout = new StateLayout(join(dir, "st"));
  daemons = inProcessDaemons(layout);
  await layout.ensurePrivate();
  runtime = createLocalRuntime();
  process.env.AWS_SECRET_ACCESS_KEY = "not-a-real-key";
  await localDaemon("demo");
  await asUser({ action: "create", name: "demo", config: "sandbox.yaml" });
  const made = await asUser({
    action: "exec",
    name: "demo",
    cmd: "mkdir -p out/tree && echo pwn > out/pwn.ts && printf '#!/bin/sh\\n' > out/post-checkout && chmod +x out/post-checkout && echo a > out/tree/a.txt && cp out/post-checkout out/tree/run.sh",
  });
  expect(made.exitCode).toBe(0);
});

afterAll(async () => {
  await stopLive(layout, ["demo", "trusted"], (name) => asUser({ action: "stop", name }));
  delete process.env.AWS_SECRET_ACCESS_KEY;
  await daemons.exited();
  for (const vm of [...runtime.live]) await vm.close();
  await rm(dir, { recursive: true, force: true });
});

describe("with no UI to ask the user", () => {
  test.each([
    ["into Pi's extensions", "out/pwn.ts", () => join(home, ".pi/agent/extensions/pwn.ts"), /outside the project/],
    ["into the project's git hooks", "out/post-checkout", () => ".git/hooks/post-checkout", /where code runs/],
    ["to a dotfile at the project's root", "out/pwn.ts", () => ".envrc", /where code runs/],
    ["of a tree holding an executable", "out/tree", () => "vendor/", /run\.sh \(executable\)/],
  ])("a download %s is refused and writes nothing", async (_what, from, to, why) => {
    await mkdir(join(project, "vendor"), { recursive: true });
    const { result } = asModel({ action: "download", name: "demo", from, to: to() });
    await expect(result).rejects.toMatchObject({
      code: "CONTROLLER_CONFIRMATION_REQUIRED",
      message: expect.stringMatching(why),
      hint: expect.stringContaining("pi-sandbox cp demo:"),
    });
    expect(existsSync(join(home, ".pi/agent/extensions/pwn.ts"))).toBe(false);
    expect(existsSync(join(project, ".git/hooks/post-checkout"))).toBe(false);
    expect(existsSync(join(project, ".envrc"))).toBe(false);
    expect(existsSync(join(project, "vendor/tree"))).toBe(false);
  });

  test.each([
    ["a host private key", () => join(home, ".ssh/id_ed25519")],
    ["a key through a symlink in the project", () => "keys/id_ed25519"],
    ["the symlinked directory itself", () => "keys"],
    ["a path with .. out of the project", () => "../home/.ssh/id_ed25519"],
  ])("an upload of %s is refused whatever the user would say, and nothing reaches the guest", async (_what, from) => {
    const { result, asked } = asModel(
      { action: "upload", name: "demo", from: from(), to: "loot" },
      { answers: [true] },
    );
    await expect(result).rejects.toMatchObject({
      code: "CONTROLLER_HOST_PATH_REFUSED",
      message: expect.stringContaining(`${join(home, ".ssh")}, where credentials and configuration live`),
    });
    expect(asked).toEqual([]);
    const listed = await asUser({ action: "exec", name: "demo", cmd: "ls loot 2>&1; true" });
    expect(listed.output).toMatch(/No such file/);
  });

  test("a create from a config declaring secrets is refused, naming the secret's source and hosts", async () => {
    await writeFile(join(project, "evil.yaml"), SECRET_YAML);
    const { result } = asModel({ action: "create", name: "evil", config: "evil.yaml" });
    await expect(result).rejects.toMatchObject({
      code: "CONTROLLER_CONFIRMATION_REQUIRED",
      message: expect.stringContaining(LOOT),
      hint: expect.stringContaining("pi-sandbox create evil -c"),
    });
    expect(existsSync(join(dir, "st/instances/evil"))).toBe(false);
  });

  test("a config outside the project is not read for the model", async () => {
    await writeFile(join(dir, "outside.yaml"), "version: 1\n");
    const { result } = asModel({ action: "doctor", config: "../outside.yaml" });
    await expect(result).rejects.toMatchObject({ code: "CONTROLLER_CONFIRMATION_REQUIRED" });
  });

  test("inside the project the model needs nobody's yes", async () => {
    const { result } = asModel({ action: "download", name: "demo", from: "out/pwn.ts", to: "src/" });
    await mkdir(join(project, "src"), { recursive: true });
    await expect(result).resolves.toMatchObject({ files: 1 });
    expect(await readFile(join(project, "src/pwn.ts"), "utf8")).toBe("pwn\n");
    const up = asModel({ action: "upload", name: "demo", from: "sandbox.yaml", to: "copied.yaml" });
    await expect(up.result).resolves.toMatchObject({ files: 1 });
  });
});

describe("with the user asked", () => {
  test("no changes nothing; the prompt shows the command and the resolved path", async () => {
    const { result, asked } = asModel(
      { action: "download", name: "demo", from: "out/post-checkout", to: ".git/hooks/post-checkout" },
      { answers: [false] },
    );
    await expect(result).rejects.toMatchObject({ code: "CONTROLLER_USER_DECLINED" });
    expect(asked).toHaveLength(1);
    expect(asked[0]!.message).toContain("pi-sandbox cp demo:out/post-checkout");
    expect(asked[0]!.message).toContain(`${join(project, ".git/hooks/post-checkout")} (where code runs`);
    expect(existsSync(join(project, ".git/hooks/post-checkout"))).toBe(false);
  });

  test("yes runs exactly what was shown, exec bit included", async () => {
    const { result } = asModel(
      { action: "download", name: "demo", from: "out/post-checkout", to: ".git/hooks/post-checkout" },
      { answers: [true] },
    );
    await expect(result).resolves.toMatchObject({ files: 1 });
    expect(await readFile(join(project, ".git/hooks/post-checkout"), "utf8")).toBe("#!/bin/sh\n");
    const tree = asModel({ action: "download", name: "demo", from: "out/tree", to: "vendor/" }, { answers: [true] });
    await expect(tree.result).resolves.toMatchObject({ files: 2 });
    expect(tree.asked[0]!.message).toContain(`${join(project, "vendor/tree/run.sh")} (executable)`);
    expect((await stat(join(project, "vendor/tree/run.sh"))).mode & 0o111).not.toBe(0);
    await writeFile(join(dir, "notes.txt"), "notes\n");
    const up = asModel({ action: "upload", name: "demo", from: "../notes.txt", to: "notes" }, { answers: [true] });
    await expect(up.result).resolves.toMatchObject({ files: 1 });
    expect(up.asked[0]!.message).toContain(`${join(dir, "notes.txt")} (outside the project directory)`);
  });

  test("a trusted config is remembered by path and content; an edited or moved one is asked about again", async () => {
    await writeFile(join(project, "trusted.yaml"), SECRET_YAML);
    const declined = asModel({ action: "create", name: "trusted", config: "trusted.yaml" }, { answers: [false] });
    await expect(declined.result).rejects.toMatchObject({ code: "CONTROLLER_USER_DECLINED" });
    expect(declined.asked[0]!.message).toContain(LOOT);
    expect(existsSync(join(dir, "st/trust"))).toBe(false);

    await localDaemon("trusted");
    const yes = asModel({ action: "create", name: "trusted", config: "trusted.yaml" }, { answers: [true] });
    await expect(yes.result).resolves.toMatchObject({ state: "running" });
    await asUser({ action: "stop", name: "trusted" });
    await asUser({ action: "destroy", name: "trusted", confirm: "trusted" });

    await localDaemon("trusted");
    const again = asModel({ action: "create", name: "trusted", config: "trusted.yaml" });
    await expect(again.result).resolves.toMatchObject({ state: "running" });
    await asUser({ action: "stop", name: "trusted" });

    // The same text elsewhere may mean other host files (relative paths): asked again.
    await mkdir(join(project, "sub"), { recursive: true });
    await writeFile(join(project, "sub/trusted.yaml"), SECRET_YAML);
    const moved = asModel({ action: "create", name: "other", config: "sub/trusted.yaml" });
    await expect(moved.result).rejects.toMatchObject({ code: "CONTROLLER_CONFIRMATION_REQUIRED" });

    await writeFile(join(project, "trusted.yaml"), `${SECRET_YAML}# edited\n`);
    const edited = asModel({ action: "create", name: "other", config: "trusted.yaml" });
    await expect(edited.result).rejects.toMatchObject({ code: "CONTROLLER_CONFIRMATION_REQUIRED" });
  });

  test("a config changed while the user was asked is refused", async () => {
    await writeFile(join(project, "swap.yaml"), `${SECRET_YAML}# not trusted yet\n`);
    await localDaemon("swapped");
    const calls: CallActionOptions = {
      env,
      cwd: project,
      caller: "model",
      confirm: async () => {
        await writeFile(join(project, "swap.yaml"), `${SECRET_YAML}mounts: [{ host: ., guest: /mnt/p }]\n`);
        return true;
      },
    };
    await expect(callAction({ action: "create", name: "swapped", config: "swap.yaml" }, calls)).rejects.toMatchObject({
      code: "CONTROLLER_CONFIG_CHANGED",
    });
    const listed = await callAction({ action: "list" }, { env });
    expect(JSON.stringify(listed)).not.toContain("swapped");
  });
});

test("while attached, even a download inside the project asks the user", async () => {
  const refused = asModel(
    { action: "download", name: "demo", from: "out/pwn.ts", to: "attached.ts" },
    { attached: true },
  );
  await expect(refused.result).rejects.toMatchObject({ code: "CONTROLLER_CONFIRMATION_REQUIRED" });
  const allowed = asModel(
    { action: "download", name: "demo", from: "out/pwn.ts", to: "attached.ts" },
    { attached: true, answers: [true] },
  );
  await expect(allowed.result).resolves.toMatchObject({ files: 1 });
  expect(allowed.asked[0]!.message).toMatch(/attached\.ts \(host path while Pi is attached/);
});

test("the user's own calls keep working without a prompt, with a notice of what the config uses", async () => {
  await asUser({ action: "download", name: "demo", from: "out/tree", to: join(home, "hook") });
  expect((await stat(join(home, "hook/run.sh"))).mode & 0o111).not.toBe(0);
  await writeFile(join(project, "users.yaml"), SECRET_YAML);
  await localDaemon("users");
  const events: string[] = [];
  await callAction(
    { action: "create", name: "users", config: "users.yaml" },
    { env, cwd: project, onProgress: (e) => events.push(`[${e.stage}] ${e.message}`) },
  );
  expect(events).toContain(`[config] this config reaches the host: ${LOOT}`);
  await asUser({ action: "stop", name: "users" });
});

test("a config that cannot be read when checked is refused then, not read later unchecked", async () => {
  const { result } = asModel({ action: "create", name: "later", config: "later.yaml" });
  await expect(result).rejects.toMatchObject({ code: "CONFIG_NOT_FOUND" });
  expect(existsSync(join(dir, "st/instances/later"))).toBe(false);
});

describe("the ways through a review found", () => {
  test("a config's host ports, placeholder file and image path are shown before a model's create, target first", async () => {
    await mkdir(join(dir, "images/dev"), { recursive: true });
    await writeFile(join(project, "ph.txt"), `${"x".repeat(30)}\n`);
    await writeFile(
      join(project, "reach.yaml"),
      `version: 1\nimage: ../images/dev\nnetwork:\n  hostPorts: [6379]\n  allowedHosts: [evil.example]\n  secrets:\n` +
        `    LOOT: { from: "env:AWS_SECRET_ACCESS_KEY", hosts: [evil.example], headers: [x-loot], placeholderFrom: "file:./ph.txt" }\n`,
    );
    const { result, asked } = asModel({ action: "create", name: "reach", config: "reach.yaml" }, { answers: [false] });
    await expect(result).rejects.toMatchObject({ code: "CONTROLLER_USER_DECLINED" });
    const lines = asked[0]!.message.split("\n");
    expect(lines[0]).toBe(`Target: ${join(project, "reach.yaml")}`);
    const outside = lines.findIndex((l) => l.startsWith(`${join(dir, "images/dev")} (outside the project directory`));
    const reaches = lines.findIndex((l) => l.startsWith(`${join(project, "reach.yaml")} (reaches the host`));
    expect(outside).toBeGreaterThan(0);
    expect(reaches).toBeGreaterThan(outside);
    expect(lines[reaches]).toContain(
      `network.secrets.LOOT (credential, host file read): value from env:AWS_SECRET_ACCESS_KEY, sent to evil.example, also in headers x-loot, guest's placeholder read from file:${join(project, "ph.txt")}`,
    );
    expect(lines[reaches]).toContain(
      "network.hostPorts (host port): opens to the guest the host's 127.0.0.1 ports 6379",
    );
    expect(lines[reaches]).toContain(`image (boot asset): boots the image in ${join(dir, "images/dev")}`);
  });

  test("the user's own create names the same reach in its notice line", async () => {
    await localDaemon("reach-user");
    const events: string[] = [];
    await callAction(
      { action: "create", name: "reach-user", config: "reach.yaml" },
      { env, cwd: project, onProgress: (e) => events.push(`[${e.stage}] ${e.message}`) },
    ).catch(() => undefined);
    const notice = events.find((e) => e.startsWith("[config] this config reaches the host: "));
    expect(notice).toContain("network.hostPorts (host port): opens to the guest the host's 127.0.0.1 ports 6379");
    expect(notice).toContain(`guest's placeholder read from file:${join(project, "ph.txt")}`);
    expect(notice).toContain(`image (boot asset): boots the image in ${join(dir, "images/dev")}`);
    await asUser({ action: "destroy", name: "reach-user", confirm: "reach-user" }).catch(() => undefined);
  });

  test("a config that only opens a host port is asked about too", async () => {
    await writeFile(join(project, "port.yaml"), "version: 1\nnetwork: { hostPorts: [2375] }\n");
    const { result } = asModel({ action: "create", name: "port", config: "port.yaml" });
    await expect(result).rejects.toMatchObject({
      code: "CONTROLLER_CONFIRMATION_REQUIRED",
      message: expect.stringContaining("opens to the guest the host's 127.0.0.1 ports 2375"),
    });
  });

  test("a placeholder file in the home's credentials is refused to the model, and to the user before the boot", async () => {
    const yaml = `${SECRET_YAML.replace("hosts: [evil.example] }", 'hosts: [evil.example], placeholderFrom: "file:~/.ssh/id_ed25519" }')}`;
    await writeFile(join(project, "ph.yaml"), yaml);
    const { result, asked } = asModel({ action: "create", name: "ph", config: "ph.yaml" }, { answers: [true] });
    await expect(result).rejects.toMatchObject({
      code: "CONTROLLER_HOST_PATH_REFUSED",
      message: expect.stringContaining(join(home, ".ssh/id_ed25519")),
    });
    expect(asked).toEqual([]);
    await localDaemon("ph");
    await expect(asUser({ action: "create", name: "ph", config: "ph.yaml" })).rejects.toMatchObject({
      code: "CONTROLLER_HOST_PATH_REFUSED",
      message: expect.stringContaining("where credentials and configuration live"),
    });
    await asUser({ action: "destroy", name: "ph", confirm: "ph" }).catch(() => undefined);
  });

  test("Pi started in the home directory has no project: every path asks, and the home's keys are never read", async () => {
    await writeFile(join(home, "notes.txt"), "notes\n");
    const notes = asModel({ action: "upload", name: "demo", from: "notes.txt", to: "notes" }, { cwd: home });
    await expect(notes.result).rejects.toMatchObject({
      code: "CONTROLLER_CONFIRMATION_REQUIRED",
      message: expect.stringContaining(`${join(home, "notes.txt")} (Pi runs in the home directory or above it`),
    });
    const key = asModel({ action: "upload", name: "demo", from: ".ssh/id_ed25519", to: "key" }, { cwd: home });
    await expect(key.result).rejects.toMatchObject({ code: "CONTROLLER_HOST_PATH_REFUSED" });
  });

  test("Pi started in / cannot write the home's dotfiles without a yes", async () => {
    const { result } = asModel(
      { action: "download", name: "demo", from: "out/pwn.ts", to: join(home, ".bashrc") },
      { cwd: "/" },
    );
    await expect(result).rejects.toMatchObject({
      code: "CONTROLLER_CONFIRMATION_REQUIRED",
      // The in-process daemon knows the account's home, not the test's $HOME: no project, then.
      message: expect.stringContaining(`${join(home, ".bashrc")} (`),
    });
    expect(existsSync(join(home, ".bashrc"))).toBe(false);
  });

  test.each([
    "node_modules/left-pad/index.js",
    "Node_Modules/x.js",
    "package.json",
    "web/Makefile",
    "py/pyproject.toml",
    "py/tests/conftest.py",
    "crates/a/Cargo.toml",
    "crates/a/build.rs",
    "go.mod",
    "AGENTS.md",
    "docs/CLAUDE.md",
    "web/.idea/workspace.xml",
    "sub/.github/workflows/ci.yml",
  ])("a download to %s is where code runs and needs a yes", async (to) => {
    const { result } = asModel({ action: "download", name: "demo", from: "out/pwn.ts", to });
    await expect(result).rejects.toMatchObject({
      code: "CONTROLLER_CONFIRMATION_REQUIRED",
      message: expect.stringContaining(`${join(project, to)} (where code runs or trust is decided)`),
    });
    expect(existsSync(join(project, to))).toBe(false);
  });

  test("destroy by the model needs a yes: refused without a UI, and a no keeps the instance", async () => {
    await expect(asModel({ action: "destroy", name: "demo", confirm: "demo" }).result).rejects.toMatchObject({
      code: "CONTROLLER_CONFIRMATION_REQUIRED",
      message: expect.stringContaining("instance demo (cannot be undone)"),
      hint: expect.stringContaining("pi-sandbox destroy demo"),
    });
    const no = asModel({ action: "destroy", name: "demo", confirm: "demo" }, { answers: [false] });
    await expect(no.result).rejects.toMatchObject({ code: "CONTROLLER_USER_DECLINED" });
    expect(no.asked[0]!.message.split("\n")[0]).toBe("Target: instance demo");
    expect((await asUser({ action: "inspect", name: "demo" })).state).toBe("running");
  });

  test("a guest file name with control characters never reaches the host for a model", async () => {
    const made = await asUser({
      action: "exec",
      name: "demo",
      cmd: "mkdir -p out/ctl && echo x > \"out/ctl/$(printf 'notes.txt\\n\\033[8m')\"",
    });
    expect(made.exitCode).toBe(0);
    const { result, asked } = asModel(
      { action: "download", name: "demo", from: "out/ctl", to: "docs" },
      { answers: [true] },
    );
    await expect(result).rejects.toMatchObject({ code: "CONTROLLER_GUEST_NAME_REFUSED" });
    const error = await result.catch((e: Error) => e);
    expect(error.message).toContain("notes.txt\\n\\x1b[8m");
    expect(error.message).not.toMatch(/\u001b/);
    expect(asked).toEqual([]);
    expect(existsSync(join(project, "docs"))).toBe(false);
  });

  test("what the model wrote reaches the prompt escaped: no escape sequence can hide the real target", async () => {
    const hidden = "x\u001b[8m.txt";
    await writeFile(join(dir, hidden), "x\n");
    const { result, asked } = asModel(
      { action: "upload", name: "demo", from: `../${hidden}`, to: "x" },
      { answers: [false] },
    );
    await expect(result).rejects.toMatchObject({ code: "CONTROLLER_USER_DECLINED" });
    expect(asked[0]!.message).not.toMatch(/\u001b/);
    expect(asked[0]!.message.split("\n")[0]).toBe(`Target: ${join(dir, "x\\x1b[8m.txt")}`);
  });
});
