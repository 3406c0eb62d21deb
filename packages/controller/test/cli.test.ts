import { spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { actionFromArgv } from "../src/cli/cli.js";

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "cli-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function cli(...args: string[]) {
  return spawnSync(process.execPath, [CLI, ...args], {
    encoding: "utf8",
    env: { ...process.env, PI_SANDBOX_HOME: join(dir, "state") },
  });
}

test("call prints the JSON result on stdout and exits 0", () => {
  const out = cli("call", '{"action":"list"}');
  expect(out.status).toBe(0);
  expect(JSON.parse(out.stdout)).toEqual({ instances: [] });
});

test("call prints a typed error on stderr and exits 1", () => {
  const out = cli("call", '{"action":"inspect","name":"Bad"}');
  expect(out.status).toBe(1);
  expect(out.stdout).toBe("");
  expect(JSON.parse(out.stderr)).toEqual({
    error: expect.objectContaining({ code: "CONTROLLER_INVALID_NAME", hint: expect.any(String) }),
  });
});

test("human commands print readable text; usage errors exit 2", () => {
  expect(cli("list").stdout).toBe("no instances\n");
  const help = cli("help");
  expect(help.stdout).toMatch(/usage: pi-sandbox/);
  expect(help.stdout).toMatch(/- shell \(user only\)/);
  const bad = cli("frobnicate");
  expect(bad.status).toBe(2);
  expect(bad.stderr).toMatch(/unknown command frobnicate/);
});

test("subcommands map to actions", async () => {
  expect((await actionFromArgv(["create", "demo", "-c", "sandbox.yaml"])).action).toEqual({
    action: "create",
    name: "demo",
    config: "sandbox.yaml",
    template: undefined,
  });
  expect((await actionFromArgv(["exec", "demo", "--timeout", "500", "--", "ls", "-la"])).action).toMatchObject({
    action: "exec",
    cmd: "ls -la",
    timeoutMs: 500,
  });
  expect((await actionFromArgv(["destroy", "web", "--confirm", "web", "--template"])).action).toEqual({
    action: "destroy",
    name: "web",
    confirm: "web",
    kind: "templates",
  });
  expect((await actionFromArgv(["ssh", "demo", "alice"])).action).toEqual({
    action: "shell",
    name: "demo",
    user: "alice",
  });
});

test("call answers bad JSON with a coded JSON error; an option a command does not take is a usage error", () => {
  const bad = cli("call", "not json");
  expect(bad.status).toBe(1);
  expect(JSON.parse(bad.stderr)).toEqual({
    error: expect.objectContaining({ code: "CONTROLLER_BAD_INPUT", hint: expect.any(String) }),
  });
  const extra = cli("start", "demo", "-c", "x.yaml");
  expect(extra.status).toBe(2);
  expect(extra.stderr).toMatch(/Unknown option '-c'/);
  expect(cli("ls").stdout).toBe("no instances\n");
});
