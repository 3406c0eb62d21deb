// Starting the controller's own long-lived processes (an instance's daemon, the state root's waker)
// detached, with their Node flags and environment. A leaf: the waker, which must stay small, starts
// daemons with it without loading the client, the config package or the state layout.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { daemonMallocEnv } from "./daemon-malloc.js";

/**
 * V8 flags of daemon and waker processes: long-lived but allocating little, a small young
 * generation keeps their resident memory down (the default semi-space lets idle garbage pile up to
 * tens of MiB).
 */
export const DAEMON_NODE_FLAGS = ["--max-semi-space-size=1"];

/** The environment of a daemon process: the caller's, its state root, and malloc's setting (daemon-malloc.ts). */
export function daemonEnv(env: NodeJS.ProcessEnv, root: string): NodeJS.ProcessEnv {
  return { ...env, ...daemonMallocEnv(env), PI_SANDBOX_HOME: root };
}

/**
 * A compiled program entry of this package, `dist/<path>`. The caller may run from the sources
 * (tests, `@pi-sandbox/source`); the processes always run the built copy, because they are
 * separate Node processes without a TypeScript loader.
 */
function builtEntry(path: string): string {
  const fromSources = import.meta.url.endsWith(".ts");
  return fileURLToPath(new URL(fromSources ? `../dist/${path}` : `./${path}`, import.meta.url));
}

/** The compiled daemon entry, `dist/daemon/main.js`. */
export function daemonEntry(): string {
  return builtEntry("daemon/main.js");
}

/** The compiled waker entry, `dist/waker/main.js`. */
export function wakerEntry(): string {
  return builtEntry("waker/main.js");
}

/** What is known of a detached process: its exit code once it exited (null after a signal). */
export interface DetachedProcess {
  exited?: number | null;
  /** Resolves with the exit code when it exits (it may never, for a daemon that starts well). */
  exit: Promise<number | null>;
}

/**
 * Starts `node` with the daemon flags on `entry` and `args`, detached (it outlives the caller),
 * stdout and stderr appended to the file open as `logFd`, in `env`.
 */
export function spawnDetached(
  node: string,
  entry: string,
  args: readonly string[],
  logFd: number,
  env: NodeJS.ProcessEnv,
): DetachedProcess {
  const child = spawn(node, [...DAEMON_NODE_FLAGS, entry, ...args], {
    detached: true,
    stdio: ["ignore", logFd, logFd],
    env,
  });
  let exited!: (code: number | null) => void;
  const state: DetachedProcess = { exit: new Promise((resolve) => (exited = resolve)) };
  child.once("exit", (code) => {
    state.exited = code;
    exited(code);
  });
  // A Node that cannot be started (gone since it was found) reads as exit 127, as in a shell.
  child.once("error", () => {
    state.exited ??= 127;
    exited(state.exited);
  });
  child.unref();
  return state;
}
