// Starting an instance's daemon detached when none answers, and waiting for its socket.
import { existsSync } from "node:fs";
import { mkdir, open, readFile } from "node:fs/promises";
import { dirname } from "node:path";
import { ControllerError } from "../errors.js";
import type { EntryKind, StateLayout } from "../state/layout.js";
import { daemonLive, pidAlive } from "../state/liveness.js";
import { daemonEntry, daemonEnv, spawnDetached, type DetachedProcess } from "../daemon-process.js";
import { findDaemonNode } from "../node-floor.js";
import { traceMark } from "../trace.js";

export { daemonEntry, daemonEnv };

/** How long a fresh daemon may take to open its socket. */
const HANDSHAKE_TIMEOUT_MS = 30_000;
/**
 * How often a new daemon's socket is looked for, in ms: every wait for one is on the way to a
 * start's first preview byte (the check is a file read and a connect).
 */
const HANDSHAKE_POLL_MS = 20;
/** How often a spawn that lost the race to a daemon that already came and went is repeated. */
const MAX_RESPAWNS = 5;

async function tail(path: string, lines: number): Promise<string> {
  try {
    return (await readFile(path, "utf8"))
      .split("\n")
      .slice(-lines - 1)
      .join("\n")
      .trim();
  } catch {
    return "";
  }
}

/**
 * Makes sure a daemon owns the entry, spawning one detached if needed, and waits for its socket.
 * Racing clients are fine: the daemon takes an exclusive pid file, and a loser exits at once
 * while the winner's socket comes up.
 */
export async function ensureDaemon(
  layout: StateLayout,
  kind: EntryKind,
  name: string,
  options: { env?: NodeJS.ProcessEnv; signal?: AbortSignal; onSpawned?: () => void } = {},
): Promise<void> {
  const pidFile = layout.pidFile(kind, name);
  const socketPath = layout.socketPath(kind, name);
  // A daemon this process is already starting (cli/main.ts starts one before the CLI's modules
  // load): waited for rather than raced by a second spawn; if it failed, this call starts one itself.
  const starting = inFlight.get(socketPath);
  if (starting) await Promise.race([starting, aborted(options.signal)]);
  if ((await daemonLive(pidFile, socketPath)).live) return;
  const started = startDaemon(layout, kind, name, pidFile, socketPath, options);
  inFlight.set(
    socketPath,
    started.catch(() => undefined),
  );
  try {
    await started;
  } finally {
    inFlight.delete(socketPath);
  }
}

/** Daemons being started by this process, by socket path; each settles once its start has. */
const inFlight = new Map<string, Promise<void>>();

/** Rejects with the signal's reason once it aborts (never settles without a signal). */
function aborted(signal: AbortSignal | undefined): Promise<never> {
  return new Promise((_, reject) => {
    if (!signal) return;
    if (signal.aborted) reject(signal.reason);
    else signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
}

async function startDaemon(
  layout: StateLayout,
  kind: EntryKind,
  name: string,
  pidFile: string,
  socketPath: string,
  options: { env?: NodeJS.ProcessEnv; signal?: AbortSignal; onSpawned?: () => void },
): Promise<void> {
  const entry = daemonEntry();
  if (!existsSync(entry)) {
    throw new ControllerError("CONTROLLER_DAEMON_START_FAILED", `controller daemon script ${entry} is missing`, {
      hint: "Build the package (npm run build) or reinstall it.",
      details: { entry },
    });
  }
  const env = options.env ?? process.env;
  const node = findDaemonNode(env);
  const logFile = layout.logFile(kind, name);
  await mkdir(dirname(logFile), { recursive: true, mode: 0o700 });
  const spawnOne = async (): Promise<DetachedProcess> => {
    const log = await open(logFile, "a", 0o600);
    const args = ["--root", layout.root, "--kind", kind, "--name", name];
    const child = spawnDetached(node, entry, args, log.fd, daemonEnv(env, layout.root));
    await log.close();
    return child;
  };
  let spawned = await spawnOne();
  traceMark("client: daemon spawned");
  options.onSpawned?.();
  let respawns = 0;
  const deadline = Date.now() + HANDSHAKE_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (options.signal?.aborted) throw options.signal.reason;
    const { live, pid } = await daemonLive(pidFile, socketPath);
    if (live) {
      traceMark("client: daemon answers");
      return;
    }
    // Exit 0 means this spawn lost the race to another daemon: wait while that one opens its
    // socket, and spawn again if it has come and gone already (a racing stop's daemon exits when
    // done). Any other exit is a failed start.
    if (spawned.exited === 0 && !(pid !== undefined && pidAlive(pid)) && respawns < MAX_RESPAWNS) {
      respawns++;
      spawned = await spawnOne();
      continue;
    }
    if (spawned.exited !== undefined && spawned.exited !== 0) break;
    await new Promise((r) => setTimeout(r, HANDSHAKE_POLL_MS));
  }
  const exited = spawned.exited;
  throw new ControllerError(
    "CONTROLLER_DAEMON_START_FAILED",
    exited !== undefined
      ? `the controller for ${name} exited during startup (code ${exited})`
      : `the controller for ${name} did not answer within ${HANDSHAKE_TIMEOUT_MS / 1000} s`,
    { hint: `See its log: ${logFile}`, details: { logFile, logTail: await tail(logFile, 20) } },
  );
}
