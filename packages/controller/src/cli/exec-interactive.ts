// `pi-sandbox exec -i` and `-it`: a command with the user's stdin (and with -t a terminal), like
// `docker exec -it`. The agent's exec has no stdin, so these run over the ssh access that `shell`
// opens: the guest resolves the working directory the way exec does (an exec of `pwd`), then ssh
// runs the command there in a login shell, with -e's variables, and the CLI exits with its code.

import { spawn } from "node:child_process";
import { constants } from "node:os";
import { shellQuote } from "@pi-sandbox/config";
import { splitShellWords } from "../actions/kit/shell-words.js";

/** What the runner needs from the CLI; injected so it is testable without a VM. */
export interface InteractiveIo {
  /** Calls one action. */
  call(action: Record<string, unknown>): Promise<unknown>;
  /** Writes guest output (escaped by the CLI). */
  out(text: string): void;
  /** Writes guest stderr and notices (escaped by the CLI). */
  err(text: string): void;
  /** Whether stdin is a terminal (-t needs one). */
  stdinIsTTY: boolean;
  /** Runs ssh: resolves with its exit code; default spawns it. */
  runSsh?(argv: string[], tty: boolean, io: Pick<InteractiveIo, "out" | "err">): Promise<number>;
}

/** The exec action's fields the runner uses. */
export interface InteractiveExec {
  name: string;
  cmd: string;
  cwd?: string;
  env?: Record<string, string>;
}

/** The command line ssh runs in the guest: cd, the variables, then a login shell with the command. */
export function remoteCommand(dir: string, exec: InteractiveExec): string {
  const env = Object.entries(exec.env ?? {}).map(([key, value]) => shellQuote(`${key}=${value}`));
  const prefix = env.length > 0 ? `env ${env.join(" ")} ` : "";
  return `cd ${shellQuote(dir)} && exec ${prefix}"\${SHELL:-/bin/sh}" -lc ${shellQuote(exec.cmd)}`;
}

/**
 * ssh's argv for the command: the access's options as `shell` gives them (`-F none` and the rest,
 * listed once in the vm package's ssh-forwarder.ts), -t or -T, the destination, the command.
 */
export function sshArgv(accessCommand: string, tty: boolean, remote: string): string[] | undefined {
  const argv = splitShellWords(accessCommand);
  if (!argv || argv[0] !== "ssh" || argv.length < 2) return undefined;
  const destination = argv.at(-1)!;
  return [...argv.slice(0, -1), tty ? "-t" : "-T", destination, remote];
}

function spawnSsh(argv: string[], tty: boolean, io: Pick<InteractiveIo, "out" | "err">): Promise<number> {
  return new Promise((resolve) => {
    // With a terminal, Ctrl-C belongs to the guest (ssh passes it on); without, ssh ends on it.
    const ignore = () => undefined;
    process.on("SIGINT", ignore);
    // With -t the guest has the user's terminal, as with `shell`; without, its output is text
    // the CLI escapes like any other.
    const child = spawn(argv[0]!, argv.slice(1), { stdio: tty ? "inherit" : ["inherit", "pipe", "pipe"] });
    child.stdout?.setEncoding("utf8").on("data", (text: string) => io.out(text));
    child.stderr?.setEncoding("utf8").on("data", (text: string) => io.err(text));
    const done = (code: number) => {
      process.off("SIGINT", ignore);
      resolve(code);
    };
    child.once("error", (error) => {
      io.err(`could not run ssh (${error.message})\n`);
      done(EXEC_CLI_FAILED);
    });
    child.once("close", (code, signal) => done(code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0)));
  });
}

/**
 * exec's exit code when the CLI itself failed (docker's 125); the guest shell's own 126 (cannot
 * run) and 127 (not found) and the command's codes pass through.
 */
export const EXEC_CLI_FAILED = 125;

/** Runs `exec` with stdin (and a terminal with `tty`); resolves with the command's exit code. */
export async function execInteractive(exec: InteractiveExec, tty: boolean, io: InteractiveIo): Promise<number> {
  if (tty && !io.stdinIsTTY) {
    io.err("exec -t needs a terminal on stdin (the input device is not a TTY); use -i alone\n");
    return EXEC_CLI_FAILED;
  }
  // Where exec would run: the guest resolves cwd (and refuses a missing one) the same way.
  const where = (await io.call({
    action: "exec",
    name: exec.name,
    cmd: "pwd",
    ...(exec.cwd === undefined ? {} : { cwd: exec.cwd }),
    timeoutMs: 30_000,
  })) as { output?: string; exitCode?: number };
  // The last line: a login file may print before the command.
  const dir = (where.output ?? "").trimEnd().split("\n").at(-1) ?? "";
  if (where.exitCode !== 0 || !dir.startsWith("/") || /[\0-\x1f\x7f]/.test(dir)) {
    io.err(`could not find the guest working directory (pwd printed ${JSON.stringify(dir)})\n`);
    return EXEC_CLI_FAILED;
  }
  const access = (await io.call({ action: "shell", name: exec.name })) as { command: string };
  const argv = sshArgv(access.command, tty, remoteCommand(dir, exec));
  if (!argv) {
    io.err(`the shell action returned an unexpected command; not running it:\n${access.command}\n`);
    return EXEC_CLI_FAILED;
  }
  return (io.runSsh ?? spawnSsh)(argv, tty, io);
}
