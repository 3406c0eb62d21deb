// `pi-sandbox shell` on a terminal: runs the ssh command the shell action returned, with the
// user's terminal, like `limactl shell`. The access (forwarder and key) closes itself once idle.

import { spawn } from "node:child_process";
import { constants } from "node:os";
import { splitShellWords } from "../actions/kit/shell-words.js";

/**
 * Runs `command` (the `ssh …` line of the shell action) with inherited stdio and resolves with
 * ssh's exit code, 128+N if a signal N ended it, or 127 when ssh could not be started.
 */
export function runSshSession(command: string, err: (text: string) => void): Promise<number> {
  const argv = splitShellWords(command);
  if (!argv || argv[0] !== "ssh") {
    err(`the shell action returned an unexpected command; not running it:\n${command}\n`);
    return Promise.resolve(1);
  }
  return new Promise((resolve) => {
    // Ctrl-C belongs to the session: ssh passes it to the guest once it has the terminal, and
    // before that ssh itself ends on it and the CLI exits with its code.
    const ignore = () => undefined;
    process.on("SIGINT", ignore);
    const child = spawn(argv[0]!, argv.slice(1), { stdio: "inherit" });
    const done = (code: number) => {
      process.off("SIGINT", ignore);
      resolve(code);
    };
    child.once("error", (error) => {
      err(`could not run ssh (${error.message}); run it yourself:\n${command}\n`);
      done(127);
    });
    child.once("exit", (code, signal) => done(code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0)));
  });
}
