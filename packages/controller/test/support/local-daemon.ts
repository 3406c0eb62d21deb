// The daemon's InstanceController in-process over a runtime, as the client would reach it: each
// entry gets a pid file and a socket that answers pings (liveness as inspect judges it), and a
// fresh controller once the last one finished, as the client spawns daemons.
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { StateLayout } from "../../src/client/index.js";
import type { EntryKind } from "../../src/state/layout.js";
import { InstanceController, createFileLogger, createLocalRuntime, type LocalRuntime } from "../../src/testing.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- results are loose JSON in tests
export type Loose = Record<string, any>;

/** Calls actions on in-process daemons; `close()` stops what runs and ends their ping sockets. */
export interface LocalDaemons {
  call(action: Loose, progress?: string[]): Promise<Loose>;
  /** The entry's current controller (a fresh one once the last finished). */
  daemon(name: string, kind?: EntryKind): Promise<InstanceController>;
  /** `kind/name` keys whose ping socket stops answering while listed (a daemon under SIGSTOP). */
  readonly silent: Set<string>;
  close(): Promise<void>;
}

/** `now` drives the controllers' idle and checkpoint clocks (default `Date.now`). */
export function localDaemons(
  layout: StateLayout,
  runtime: LocalRuntime,
  options: { now?: () => number } = {},
): LocalDaemons {
  const daemons = new Map<string, { name: string; controller: InstanceController }>();
  const servers = new Map<string, Server>();
  const silent = new Set<string>();

  /** Fresh controllers being set up, so that callers racing for one get the same. */
  const starting = new Map<string, Promise<InstanceController>>();

  function daemon(name: string, kind: EntryKind = "instances"): Promise<InstanceController> {
    const key = `${kind}/${name}`;
    const current = daemons.get(key)?.controller;
    if (current && !current.exiting) return Promise.resolve(current);
    let fresh = starting.get(key);
    if (!fresh) {
      fresh = freshDaemon(name, kind, current).finally(() => starting.delete(key));
      starting.set(key, fresh);
    }
    return fresh;
  }

  /** A new controller for the entry once `previous` (exiting) has finished, as a spawned daemon waits for the old one. */
  async function freshDaemon(
    name: string,
    kind: EntryKind,
    previous: InstanceController | undefined,
  ): Promise<InstanceController> {
    const key = `${kind}/${name}`;
    await previous?.finished;
    await mkdir(layout.entryDir(kind, name), { recursive: true, mode: 0o700 });
    await writeFile(layout.pidFile(kind, name), `${process.pid}\n`);
    servers.get(key)?.close();
    await rm(layout.socketPath(kind, name), { force: true });
    const server = createServer((socket) => {
      socket.on("data", (chunk) => {
        if (silent.has(key)) return;
        for (const line of chunk.toString().split("\n").filter(Boolean)) {
          const message = JSON.parse(line) as { id: number; type: string };
          if (message.type === "ping")
            socket.write(`${JSON.stringify({ id: message.id, type: "pong", pid: process.pid, state: "running" })}\n`);
        }
      });
      socket.on("error", () => undefined);
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(layout.socketPath(kind, name), resolve);
    });
    servers.set(key, server);
    const log = createFileLogger(layout.logFile(kind, name), `[${name}]`);
    const controller = new InstanceController(layout, kind, name, log, runtime, options);
    daemons.set(key, { name, controller });
    return controller;
  }

  return {
    silent,
    daemon,
    async call(action, progress = []) {
      const kind: EntryKind = action.action === "prepare" ? "templates" : (action.kind ?? "instances");
      const controller = await daemon(action.name as string, kind);
      return (await controller.call(action as Loose & { action: string }, {
        progress: (e) => progress.push(`[${e.stage}] ${e.message}`),
      })) as Loose;
    },
    async close() {
      // A running instance holds preview listeners and the agent's channel: stop it.
      for (const { name, controller } of daemons.values()) {
        if (controller.running && !controller.exiting)
          await controller.call({ action: "stop", name }, { progress: () => undefined }).catch(() => undefined);
      }
      daemons.clear();
      for (const server of servers.values()) server.close();
      servers.clear();
      silent.clear();
    },
  };
}

/** A temp directory with a sandbox.yaml, its state root, the local runtime and in-process daemons over it. */
export interface LocalSandbox {
  /** The temp directory; `sandbox.yaml` is in it, the state root in `state/`. */
  dir: string;
  layout: StateLayout;
  runtime: LocalRuntime;
  daemons: LocalDaemons;
  /** Stops the daemons, closes every local VM (live or suspended) and removes the directory. */
  close(): Promise<void>;
}

/** Makes a {@link LocalSandbox} whose `sandbox.yaml` holds `yaml`; `now` as for {@link localDaemons}. */
export async function localSandbox(
  prefix: string,
  yaml: string,
  options: { now?: () => number } = {},
): Promise<LocalSandbox> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  const layout = new StateLayout(join(dir, "state"));
  await layout.ensurePrivate();
  const runtime = createLocalRuntime();
  const daemons = localDaemons(layout, runtime, options);
  await writeFile(join(dir, "sandbox.yaml"), yaml);
  return {
    dir,
    layout,
    runtime,
    daemons,
    async close() {
      await daemons.close();
      for (const vm of [...runtime.live, ...runtime.suspended.values()]) await vm.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
