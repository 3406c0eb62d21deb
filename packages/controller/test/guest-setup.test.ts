// The workspace path comes from a sandbox.yaml; the command that creates it in the guest must pass
// it to the shell as one literal word, whatever it holds.
import { execFileSync } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConfig } from "@pi-sandbox/config";
import type { SupervisorClient } from "@pi-sandbox/supervisor";
import { installGuestConfig } from "../src/daemon/guest-setup.js";

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "ctl-guest-setup-"));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

test("installGuestConfig quotes the workspace for sh: $(), backticks, quotes and $VARS stay literal", async () => {
  // Each trick would create a file in `dir`, the commands' working directory.
  const name = `ws $(touch pwned) \`touch pwned2\` "dq" 'sq' $HOME \\ ;touch pwned3`;
  const hostile = `${dir}/${name}`;
  // A sandbox.yaml may name such a workspace: only its first character is checked.
  const yaml = `version: 1\nworkspace: ${JSON.stringify(hostile)}\n`;
  const workspace = parseConfig(yaml).workspace;
  expect(workspace).toBe(hostile);
  // The agent's exec runs a command string through a shell, as here (/bin/sh -c in `cwd`).
  const commands: string[] = [];
  const supervisor = {
    workspace,
    exec: async (cmd: string, options: { cwd?: string }) => {
      commands.push(cmd);
      execFileSync("/bin/sh", ["-c", cmd], { cwd: options.cwd === "/" ? dir : options.cwd });
      return { output: "", exitCode: 0 };
    },
    writeFile: (path: string, text: string) => writeFile(path, text),
  } as unknown as SupervisorClient;
  await installGuestConfig(supervisor, yaml);
  expect(commands).toHaveLength(1);
  expect(await readFile(join(hostile, ".sandbox.yaml"), "utf8")).toBe(yaml);
  // Nothing in the path ran: one directory, named exactly as written.
  expect(await readdir(dir)).toEqual([name]);
});
