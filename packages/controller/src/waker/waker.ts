// The waker: one small process per state root that holds the previews of parked instances (their
// daemons exited after an auto-suspend), wakes an instance on its first request by starting its
// daemon, and hands the held connections to that daemon's gateway once it listens again.
//
// It loads neither the client nor the config package nor the state layout (tens of MiB resident):
// the daemon that starts it names its files, and it starts daemons as the client does
// (daemon-process.ts). It binds only loopback addresses, and answers on a socket in a private
// directory, checked here again, as daemons do.
import { lstat, rm } from "node:fs/promises";
import { createServer, type Server, type Socket } from "node:net";
import { dirname } from "node:path";
import { isLoopbackV4 } from "@pi-sandbox/ingress/host-guard";
import type { ParkedPreview, WakerReply, WakerRequest } from "../state/waker-call.js";
import { listenPrivate } from "../private-socket.js";
import { fileIdentity, removeIfOwn, socketAccepts, takePidFile } from "../probes.js";
import { readJsonLines } from "../wire.js";
import { HeldInstance } from "./held-instance.js";

/** Where the waker's files are (the state layout names them; the daemon passes them). */
export interface WakerPaths {
  /** Its Unix socket. */
  socket: string;
  /** Its pid file, created exclusively. */
  pidFile: string;
}

/** Options of {@link runWaker}. */
export interface WakerOptions {
  /**
   * Starts the daemon of instance `name` (as the client's spawn does); resolves with its exit code
   * if it exits. A daemon that starts takes the previews back (a release) before it answers.
   */
  spawnDaemon(name: string): Promise<number | null>;
  /** Log sink (one line each). */
  log(message: string): void;
  /** How long a waker that holds nothing stays before it exits, in ms. Default 10000. */
  emptyGraceMs?: number;
  /** How long a wake may take until its daemon takes the previews back, in ms. Default 60000. */
  wakeTimeoutMs?: number;
  /** Ends the waker now, whatever it holds (SIGTERM; tests). */
  signal?: AbortSignal;
}

/** How often the waker looks whether its socket is still its own (a removed state root ends it). */
const SOCKET_LOOK_MS = 60_000;
/** Instance names as the config package allows them, roughly: the waker only keys and logs them. */
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/**
 * Refuses a socket directory that is a link, not this user's, or open to others (the daemon that
 * started the waker made it private; checked again, as whoever owns it can pose as the waker).
 */
async function assertPrivate(dir: string): Promise<void> {
  if (typeof process.getuid !== "function") return;
  const info = await lstat(dir);
  if (!info.isDirectory() || info.uid !== process.getuid() || (info.mode & 0o077) !== 0) {
    throw new Error(`the socket directory ${dir} is not a private directory of this user`);
  }
}

/** True when process `pid` exists (a zombie counts; its socket then decides). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Checks a hold request's fields: the waker binds only loopback addresses and real ports. */
function checkedHold(message: Extract<WakerRequest, { type: "hold" }>): ParkedPreview[] {
  if (typeof message.name !== "string" || !NAME.test(message.name)) throw new Error("not an instance name");
  if (typeof message.address !== "string" || !isLoopbackV4(message.address)) {
    throw new Error(`${JSON.stringify(message.address)} is not a loopback address`);
  }
  const port = (value: unknown) => Number.isInteger(value) && (value as number) >= 1 && (value as number) <= 65535;
  if (!Array.isArray(message.previews)) throw new Error("previews is not a list");
  return message.previews.map((p) => {
    if (typeof p?.key !== "string" || !port(p.hostPort) || !port(p.guestPort) || !Array.isArray(p.links))
      throw new Error("a preview is malformed");
    // The links are kept for the daemon that takes the preview back, which validates them again.
    return { key: p.key, hostPort: p.hostPort, guestPort: p.guestPort, links: p.links };
  });
}

/**
 * Runs the waker until it holds nothing (for `emptyGraceMs`) or its socket is gone; resolves with
 * an exit code. A second waker of the same state root exits at once (0).
 */
export async function runWaker(paths: WakerPaths, options: WakerOptions): Promise<number> {
  const { log } = options;
  const socketPath = paths.socket;
  await assertPrivate(dirname(socketPath));
  const owner = { alive, answers: () => socketAccepts(paths.socket), patienceMs: 2000 };
  if (!(await takePidFile(paths.pidFile, owner))) return 0;
  const pidIdentity = await fileIdentity(paths.pidFile);
  await rm(socketPath, { force: true });

  const held = new Map<string, HeldInstance>();
  /** Released instances whose daemon has not said yet whether it listens again, by the connection that released them. */
  const handing = new Map<Socket, Map<string, HeldInstance>>();
  const waking = new Set<string>();
  let pipes = 0;
  let exiting = false;
  let emptySince: NodeJS.Timeout | undefined;
  let done!: () => void;
  const finished = new Promise<void>((resolve) => (done = resolve));

  /** Exits once nothing is held, handed or piped for the grace period; anything new cancels it. */
  const review = () => {
    const busy = held.size > 0 || pipes > 0 || [...handing.values()].some((m) => m.size > 0);
    if (busy || exiting) {
      clearTimeout(emptySince);
      emptySince = undefined;
      return;
    }
    emptySince ??= setTimeout(() => {
      exiting = true;
      done();
    }, options.emptyGraceMs ?? 10_000);
  };

  const hooks = {
    wake: (name: string) => void wake(name),
    piping: (delta: 1 | -1) => {
      pipes += delta;
      review();
    },
    log,
  };

  /**
   * Starts the instance's daemon, which takes the previews back as it starts; answers the waiting
   * connections 503 when it exits first or does not in time (the listeners stay: the next request
   * tries again).
   */
  async function wake(name: string): Promise<void> {
    const instance = held.get(name);
    if (!instance || waking.has(name)) return;
    waking.add(name);
    log(`a request for ${name}: starting its controller`);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">((resolve) => {
      timer = setTimeout(() => resolve("late"), options.wakeTimeoutMs ?? 60_000);
    });
    let reason = "its controller did not take the previews back in time";
    try {
      for (let attempt = 0; held.get(name) === instance && attempt < 5; attempt++) {
        const outcome = await Promise.race([instance.released, options.spawnDaemon(name), late]);
        if (outcome === "released" || outcome === "late") break;
        // Exit 0: another controller owned the instance (the one that parked it, still exiting):
        // started again once it is gone. Any other exit is a failed start.
        if (outcome !== 0) {
          reason = `its controller exited at its start (code ${outcome}); see its controller log`;
          break;
        }
        await new Promise((r) => setTimeout(r, 200));
      }
      if (held.get(name) === instance) {
        log(`waking ${name} failed: ${reason}`);
        instance.answerUnavailable(reason);
      }
    } finally {
      clearTimeout(timer);
      waking.delete(name);
    }
  }

  function onMessage(socket: Socket, message: WakerRequest): WakerReply | Promise<WakerReply> {
    const id = message.id;
    switch (message.type) {
      case "ping":
        return { id, type: "pong", pid: process.pid, held: [...held.keys()] };
      case "hold":
        return hold(id, message);
      case "release": {
        const instance = held.get(message.name);
        if (!instance) return { id, type: "released", held: false };
        held.delete(message.name);
        instance.release();
        const mine = handing.get(socket) ?? new Map<string, HeldInstance>();
        mine.set(message.name, instance);
        handing.set(socket, mine);
        log(`${message.name}: handed back to its controller (${instance.waiting} connection(s) waiting)`);
        return {
          id,
          type: "released",
          held: true,
          address: instance.address,
          previews: [...instance.previews],
          waiting: instance.waiting,
        };
      }
      case "taken": {
        const instance = handing.get(socket)?.get(message.name);
        handing.get(socket)?.delete(message.name);
        if (instance && message.listening) instance.pipeToGateway();
        else instance?.answerUnavailable("the instance is no longer suspended; start it");
        review();
        return { id, type: "ok" };
      }
      default:
        return { id, type: "error", message: "unknown request" };
    }
  }

  async function hold(id: number, message: Extract<WakerRequest, { type: "hold" }>): Promise<WakerReply> {
    if (exiting) return { id, type: "error", message: "the waker is exiting" };
    let previews: ParkedPreview[];
    try {
      previews = checkedHold(message);
    } catch (error) {
      return { id, type: "error", message: (error as Error).message };
    }
    held.get(message.name)?.close();
    const instance = new HeldInstance(message.name, message.address, previews, hooks);
    held.set(message.name, instance);
    review();
    try {
      await instance.listen();
    } catch (error) {
      if (held.get(message.name) === instance) held.delete(message.name);
      review();
      return { id, type: "error", message: (error as Error).message };
    }
    log(
      `${message.name}: holding ${previews.map((p) => `${message.address}:${p.hostPort}`).join(", ") || "no previews"}`,
    );
    return { id, type: "held" };
  }

  const server: Server = createServer((socket) => {
    socket.on("error", () => undefined);
    socket.once("close", () => {
      // A daemon that released its previews and went away without taking them: nothing will.
      for (const instance of handing.get(socket)?.values() ?? []) {
        instance.answerUnavailable("its controller exited before it listened again");
      }
      handing.delete(socket);
      review();
    });
    readJsonLines<WakerRequest>(socket, (message) => {
      void Promise.resolve(onMessage(socket, message)).then((reply) => {
        if (!socket.destroyed) socket.write(`${JSON.stringify(reply)}\n`);
      });
    });
  });
  await listenPrivate(server, socketPath);
  const socketIdentity = await fileIdentity(socketPath);
  log(`waker ${process.pid} listening on ${socketPath}`);
  review();

  // A state root removed (or a socket replaced) under the waker: no daemon can reach it again.
  const look = setInterval(() => {
    void fileIdentity(socketPath).then((identity) => {
      if (identity === socketIdentity || exiting) return;
      log("the waker's socket is gone (its state root was removed?); exiting");
      exiting = true;
      done();
    });
  }, SOCKET_LOOK_MS);

  const onAbort = () => {
    exiting = true;
    done();
  };
  options.signal?.addEventListener("abort", onAbort, { once: true });
  if (options.signal?.aborted) onAbort();
  await finished;
  options.signal?.removeEventListener("abort", onAbort);
  clearInterval(look);
  clearTimeout(emptySince);
  if ((await fileIdentity(socketPath)) === socketIdentity) server.close();
  else server.unref();
  await removeIfOwn(paths.pidFile, pidIdentity);
  for (const instance of held.values()) instance.close();
  log(
    held.size > 0
      ? `waker ending: ${held.size} parked instance(s) lose their previews`
      : "waker exiting: it holds nothing",
  );
  return 0;
}
