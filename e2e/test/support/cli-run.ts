// The real CLI as a user runs it: `node dist/cli/main.js …` with a working directory and an
// environment (the state root, a context), its exit code and both streams once it ends.
import { execFile } from "node:child_process";
import { CLI } from "@pi-sandbox/controller/testing";

/** How a CLI run ended. */
export interface CliRun {
  /** The exit code; -1 when it ended on a signal or could not start. */
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `pi-sandbox …args` in `cwd` with `env`; `input` goes to its stdin (closed either way). */
export function runCli(
  args: string[],
  options: { cwd: string; env: NodeJS.ProcessEnv; input?: string; timeoutMs: number },
): Promise<CliRun> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [CLI, ...args],
      { cwd: options.cwd, env: options.env, encoding: "utf8", timeout: options.timeoutMs },
      (err, stdout, stderr) =>
        resolve({ code: err ? (typeof err.code === "number" ? err.code : -1) : 0, stdout, stderr }),
    );
    child.stdin?.end(options.input);
  });
}
