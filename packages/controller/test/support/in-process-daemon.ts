// Real daemons (runDaemon: the socket server, pid file and idle exit of a spawned one) run inside
// the test process over a local runtime, for tests that drive them through the client. A client
// that finds no live daemon spawns a real one, which has no image here: each daemon is waited for
// until it answers, and one entry's next daemon starts only after its last has exited (it held the
// pid file until then, and a second daemon of the entry would have stepped aside).
import { readFile } from "node:fs/promises";
import type { StateLayout } from "../../src/state/layout.js";
import { daemonLive } from "../../src/state/liveness.js";
import type { InstanceRuntime } from "../../src/daemon/runtime.js";
import { runDaemon } from "../../src/testing.js";

/** Starts in-process daemons; `exited()` resolves once all have exited. */
export interface InProcessDaemons {
  /** Runs the daemon of instance `name` over `runtime` and resolves once it answers. */
  start(name: string, runtime: InstanceRuntime): Promise<void>;
  exited(): Promise<void>;
}

export function inProcessDaemons(layout: StateLayout): InProcessDaemons {
  const runs = new Map<string, Promise<number>>();
  return {
    async start(name, runtime) {
      await runs.get(name);
      const run = runDaemon(layout, "instances", name, { runtime, idleExitMs: 1000 });
      runs.set(name, run);
      await untilAnswers(layout, name, run);
    },
    async exited() {
      await Promise.all(runs.values());
    },
  };
}

/**
 * Stops those of `names` whose daemon is live (in this process), through `stop`. A stop of an
 * instance with no daemon would spawn a real one, still writing its log and ledger into the state
 * root while the test removes it.
 */
export async function stopLive(
  layout: StateLayout,
  names: readonly string[],
  stop: (name: string) => Promise<unknown>,
): Promise<void> {
  for (const name of names) {
    const { live } = await daemonLive(layout.pidFile("instances", name), layout.socketPath("instances", name));
    if (live) await stop(name).catch(() => undefined);
  }
}

/** Resolves once the daemon `run` of instance `name` answers on its socket; fails, with its log, if it exits first. */
export async function untilAnswers(layout: StateLayout, name: string, run: Promise<number>): Promise<void> {
  let ended = false;
  const end = () => (ended = true);
  run.then(end, end);
  const pidFile = layout.pidFile("instances", name);
  const socket = layout.socketPath("instances", name);
  while (!(await daemonLive(pidFile, socket)).live) {
    if (ended) {
      const log = await readFile(layout.logFile("instances", name), "utf8").catch(() => "(no log)");
      throw new Error(
        `the in-process daemon of ${name} exited before it answered (exit ${await run}); its log:\n${log}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
