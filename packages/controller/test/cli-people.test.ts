// The CLI as people meet it (issue #28, "A CLI that speaks to people"), driven as a process
// against an empty state directory: no VM.
import { spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
let home: string;
beforeAll(async () => {
  home = await mkdtemp(join(tmpdir(), "cli-people-"));
});
afterAll(async () => {
  await rm(home, { recursive: true, force: true });
});

function cli(...args: string[]) {
  return spawnSync(process.execPath, [CLI, ...args], {
    encoding: "utf8",
    env: { ...process.env, PI_SANDBOX_HOME: join(home, "state") },
  });
}

describe("a missing instance", () => {
  test.each([
    ["exec", "nope", "--", "ls"],
    ["shell", "nope"],
    ["logs", "nope"],
    ["services", "nope", "status"],
    ["stop", "nope"],
  ])("%s says it does not exist, not that it is not running", (...argv) => {
    const out = cli(...argv);
    expect(out.stderr).toBe(
      "error CONTROLLER_NOT_FOUND: no instance named nope\nhint: List instances with pi-sandbox list.\n",
    );
  });
});

describe("exit codes", () => {
  test("exec's own failures exit 125, as docker's: no such instance, a usage error", () => {
    expect(cli("exec", "nope", "--", "ls").status).toBe(125);
    expect(cli("exec", "nope").status).toBe(125);
    expect(cli("exec", "--frobnicate", "nope", "--", "ls").status).toBe(125);
  });

  test("other commands keep 1 for errors and 2 for usage", () => {
    expect(cli("logs", "nope").status).toBe(1);
    expect(cli("logs").status).toBe(2);
  });
});
