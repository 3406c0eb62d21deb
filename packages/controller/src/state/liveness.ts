// Whether an entry's daemon is alive: its pid file, its process and whether its socket answers.
import { readFile } from "node:fs/promises";
import { connect, type Socket } from "node:net";
import { pidAlive } from "@pi-sandbox/vm/host";
import { readJsonLines, writeJsonLine, type DaemonMessage } from "../wire.js";

/** True when `pid` exists and is not a zombie (vm's reader of /proc/<pid>/stat). */
export { pidAlive };

/** Reads a pid file; undefined when missing or garbage. */
export async function readPidFile(path: string): Promise<number | undefined> {
  try {
    const pid = Number.parseInt((await readFile(path, "utf8")).trim(), 10);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Connects to `path` and resolves false on an error or after `timeoutMs`; once connected,
 * `onConnect` gets the socket and a `done` to settle with.
 */
function probeSocket(
  path: string,
  timeoutMs: number,
  onConnect: (socket: Socket, done: (ok: boolean) => void) => void,
): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(path);
    const done = (ok: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.once("connect", () => onConnect(socket, done));
    socket.once("error", () => done(false));
  });
}

/**
 * True when something accepts connections on the socket within `timeoutMs`. A pid alone can be
 * reused by an unrelated process after a crash; a listening socket in our state dir cannot.
 */
export function socketAccepts(path: string, timeoutMs = 500): Promise<boolean> {
  return probeSocket(path, timeoutMs, (_socket, done) => done(true));
}

/** A daemon is live when its pid exists and its socket accepts connections. */
export async function daemonLive(pidFile: string, socketPath: string): Promise<{ live: boolean; pid?: number }> {
  const pid = await readPidFile(pidFile);
  if (pid === undefined || !pidAlive(pid)) return { live: false, pid };
  return { live: await socketAccepts(socketPath), pid };
}

/**
 * True when the daemon on `socketPath` answers a ping within `timeoutMs`. The kernel accepts
 * connections on a listening socket even while its process is stopped (SIGSTOP) or wedged, so
 * only an answer shows the daemon itself is working.
 */
export async function daemonAnswers(socketPath: string, timeoutMs = 2000): Promise<boolean> {
  return (await daemonPing(socketPath, timeoutMs)) !== undefined;
}

/** The daemon's answer to a ping (its pid, state and idle clock), or undefined within `timeoutMs`. */
export async function daemonPing(socketPath: string, timeoutMs = 2000): Promise<Pong | undefined> {
  let pong: Pong | undefined;
  await probeSocket(socketPath, timeoutMs, (socket, done) => {
    readJsonLines<DaemonMessage>(socket, (message) => {
      if (message.id === 1 && message.type === "pong") {
        pong = message;
        done(true);
      }
    });
    writeJsonLine(socket, { id: 1, type: "ping" });
  });
  return pong;
}

/** A daemon's pong. */
export type Pong = Extract<DaemonMessage, { type: "pong" }>;
