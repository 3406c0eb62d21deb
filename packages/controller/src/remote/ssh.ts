// OpenSSH does the transport: one master connection per context (ControlMaster, its socket under
// a private 0700 directory, kept ControlPersist after the last command so the next one starts at
// once), which every command, preview forward and scp of that context shares. The user's own ssh
// configuration applies (keys, agent, Host aliases, ProxyJump): the other machine is theirs.

import { spawn, spawnSync } from "node:child_process";
import { lstatSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { constants, tmpdir } from "node:os";
import { join } from "node:path";
import { ControllerError } from "../errors.js";
import { assertPrivateDir } from "../state/layout.js";
import type { SshTarget } from "../state/contexts.js";

/** How long the master outlives the last command through it. */
const CONTROL_PERSIST = "10m";

/** The ssh program (tests and odd installs set PI_SANDBOX_SSH). */
export function sshProgram(env: NodeJS.ProcessEnv): string {
  return env.PI_SANDBOX_SSH || "ssh";
}

/** pi-sandbox on the other machine (PI_SANDBOX_REMOTE_COMMAND replaces the name on its PATH). */
export function remoteProgram(env: NodeJS.ProcessEnv): string {
  return env.PI_SANDBOX_REMOTE_COMMAND || "pi-sandbox";
}

/**
 * Runs the pi-sandbox command line `words` on the context's machine with this terminal (`tty`:
 * ssh -t) or this stdin, through the master: exec -i/-it and shell, whose sessions are ssh's
 * there. Resolves with its exit code (ssh's 255 when ssh itself failed).
 */
export async function runOverSsh(
  target: SshTarget,
  env: NodeJS.ProcessEnv,
  words: readonly string[],
  tty: boolean,
): Promise<number> {
  const dir = await ensureControlDir(env);
  // Loaded here: the rest of this module is on the way to a call's connection, opened early.
  const { shellQuote } = await import("@pi-sandbox/config");
  // The program as the user gave it (it may be a command line); the words quoted for the far shell.
  const command = [remoteProgram(env), ...words.map((word) => shellQuote(word))].join(" ");
  return new Promise((resolve) => {
    // Ctrl-C belongs to the session (ssh passes it on once it has the terminal).
    const ignore = () => undefined;
    process.on("SIGINT", ignore);
    const child = spawn(sshProgram(env), sshArgs(target, dir, [tty ? "-t" : "-T"]).concat(command), {
      stdio: "inherit",
      env,
    });
    const done = (code: number) => {
      process.off("SIGINT", ignore);
      resolve(code);
    };
    child.once("error", () => done(255));
    child.once("exit", (code, signal) => done(code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0)));
  });
}

/** The private directory of the master sockets: `$XDG_RUNTIME_DIR/pi-sandbox-ssh`, else under the temp dir. */
export function controlDir(env: NodeJS.ProcessEnv): string {
  if (env.XDG_RUNTIME_DIR) return join(env.XDG_RUNTIME_DIR, "pi-sandbox-ssh");
  const uid = typeof process.getuid === "function" ? process.getuid() : "user";
  return join(tmpdir(), `pi-sandbox-ssh-${uid}`);
}

/** Makes the control directory (0700) and checks nobody else owns or can write it. */
export async function ensureControlDir(env: NodeJS.ProcessEnv): Promise<string> {
  const dir = controlDir(env);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await assertPrivateDir(dir);
  return dir;
}

/**
 * The control directory when it already is what {@link ensureControlDir} makes sure of (this
 * user's, a directory, 0700), else undefined; without waiting for the event loop.
 */
export function privateControlDirSync(env: NodeJS.ProcessEnv): string | undefined {
  const dir = controlDir(env);
  const info = lstatSync(dir, { throwIfNoEntry: false });
  const mine = typeof process.getuid !== "function" || info?.uid === process.getuid();
  return info?.isDirectory() && mine && (info.mode & 0o077) === 0 ? dir : undefined;
}

/** ssh's options for `target` through the shared master; the destination last, after `--`. */
export function sshArgs(target: SshTarget, dir: string, extra: readonly string[] = []): string[] {
  return [
    "-o",
    "ControlMaster=auto",
    "-o",
    // %C: a hash of the destination, so the path stays short and holds no user text.
    `ControlPath=${join(dir, "%C")}`,
    "-o",
    `ControlPersist=${CONTROL_PERSIST}`,
    "-o",
    "ServerAliveInterval=15",
    "-o",
    "ServerAliveCountMax=3",
    ...(target.port !== undefined ? ["-p", String(target.port)] : []),
    ...(target.user !== undefined ? ["-l", target.user] : []),
    ...extra,
    "--",
    target.host,
  ];
}

/** Runs one ssh (or scp) to completion; CONTROLLER_CONTEXT_UNREACHABLE with its stderr when it fails. */
export function runSsh(
  program: string,
  args: readonly string[],
  what: string,
  env: NodeJS.ProcessEnv,
): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(program, args, { stdio: ["ignore", "pipe", "pipe"], env });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (c: string) => (stdout += c));
    child.stderr.setEncoding("utf8").on("data", (c: string) => (stderr = (stderr + c).slice(-4000)));
    child.once("error", (error) => reject(unreachable(what, error.message, error)));
    child.once("close", (code) => {
      if (code === 0) resolve({ stdout, stderr });
      else reject(unreachable(what, stderr.trim() || `${program} exited with code ${code}`));
    });
  });
}

/** An ssh step that failed. */
export function unreachable(what: string, why: string, cause?: unknown): ControllerError {
  return new ControllerError("CONTROLLER_CONTEXT_UNREACHABLE", `${what} failed: ${why}`, {
    hint: "Check that ssh reaches the machine on its own (ssh HOST pi-sandbox --version) and that its pi-sandbox is on the PATH of a non-interactive login.",
    cause,
  });
}

/** `ssh -O forward -L local:remote` through the master: the forward lives as long as it. */
export async function forwardPort(
  target: SshTarget,
  dir: string,
  local: string,
  remote: string,
  env: NodeJS.ProcessEnv,
): Promise<void> {
  await runSsh(
    sshProgram(env),
    sshArgs(target, dir, ["-O", "forward", "-L", `${local}:${remote}`]),
    `forwarding ${local}`,
    env,
  );
}

/**
 * Starts the context's master in the background (`ssh -N -f`), from this process's terminal so
 * that ssh can ask for a passphrase or a host key's confirmation there; returns once it is up.
 */
export async function startMaster(target: SshTarget, dir: string, env: NodeJS.ProcessEnv, what: string): Promise<void> {
  await runSsh(sshProgram(env), sshArgs(target, dir, ["-N", "-f"]), what, env);
}

/**
 * Whether the master runs (`ssh -O check`), waited for here: a process still loading its modules
 * would see an asynchronous check's end only once they are loaded.
 */
export function masterRunsSync(target: SshTarget, dir: string, env: NodeJS.ProcessEnv): boolean {
  const check = spawnSync(sshProgram(env), sshArgs(target, dir, ["-O", "check"]), { stdio: "ignore", env });
  return check.status === 0;
}

/** The master's pid, or undefined when none runs. */
export async function masterPid(target: SshTarget, dir: string, env: NodeJS.ProcessEnv): Promise<number | undefined> {
  try {
    const { stderr } = await runSsh(sshProgram(env), sshArgs(target, dir, ["-O", "check"]), "ssh -O check", env);
    const pid = /pid=(\d+)/.exec(stderr)?.[1];
    return pid === undefined ? undefined : Number(pid);
  } catch {
    return undefined;
  }
}

/** Copies with scp through the master; remote paths are written with {@link remotePath}. */
export async function scp(
  target: SshTarget,
  dir: string,
  from: readonly string[],
  to: string,
  env: NodeJS.ProcessEnv,
): Promise<void> {
  // ssh's options without `--` and the host; scp spells the port -P and takes the user as an option.
  const sshOptions = sshArgs({ url: target.url, host: target.host }, dir).slice(0, -2);
  const args = [
    ...sshOptions,
    ...(target.port !== undefined ? ["-P", String(target.port)] : []),
    ...(target.user !== undefined ? ["-o", `User=${target.user}`] : []),
  ];
  await runSsh(env.PI_SANDBOX_SCP || "scp", ["-q", "-r", "-p", ...args, "--", ...from, to], "scp", env);
}

/** `host:path` for scp (an IPv6 host in brackets). */
export function remotePath(target: SshTarget, path: string): string {
  return `${target.host.includes(":") ? `[${target.host}]` : target.host}:${path}`;
}
