// exec -i / -it over ssh: the command line ssh runs in the guest and the argv around it.
// cli-files.vm.test.ts runs both through the real CLI, the second on a pseudo-terminal.
import { execInteractive, remoteCommand, sshArgv } from "../src/cli/exec-interactive.js";

test("the guest command cds to exec's directory and runs a login shell with the variables", () => {
  expect(remoteCommand("/workspace/sub dir", { name: "d", cmd: "echo 'hi' $X", env: { X: "a b" } })).toBe(
    `cd '/workspace/sub dir' && exec env 'X=a b' "\${SHELL:-/bin/sh}" -lc 'echo '\\''hi'\\'' $X'`,
  );
  expect(remoteCommand("/w", { name: "d", cmd: "ls" })).toBe(`cd /w && exec "\${SHELL:-/bin/sh}" -lc ls`);
});

test("ssh gets -t or -T before the destination, then the command as one argument", () => {
  const access = "ssh -p 2222 -i /k/id -o StrictHostKeyChecking=yes root@127.0.0.1";
  expect(sshArgv(access, true, "cd /w && ls")).toEqual([
    "ssh",
    "-p",
    "2222",
    "-i",
    "/k/id",
    "-o",
    "StrictHostKeyChecking=yes",
    "-t",
    "root@127.0.0.1",
    "cd /w && ls",
  ]);
  expect(sshArgv(access, false, "x")?.slice(-3)).toEqual(["-T", "root@127.0.0.1", "x"]);
  expect(sshArgv("rm -rf /", false, "x")).toBeUndefined();
});

test("-t without a terminal is refused before anything is called; a bad pwd stops it", async () => {
  const calls: Record<string, unknown>[] = [];
  let errors = "";
  const io = {
    call: async (action: Record<string, unknown>) => {
      calls.push(action);
      return { output: "no such place\n", exitCode: 1 };
    },
    out: () => undefined,
    err: (text: string) => (errors += text),
    stdinIsTTY: false,
  };
  expect(await execInteractive({ name: "d", cmd: "sh" }, true, io)).toBe(125);
  expect(calls).toEqual([]);
  expect(errors).toMatch(/needs a terminal/);
  expect(await execInteractive({ name: "d", cmd: "sh", cwd: "x" }, false, io)).toBe(125);
  expect(calls).toEqual([{ action: "exec", name: "d", cmd: "pwd", cwd: "x", timeoutMs: 30_000 }]);
});
