// Whether an entry's daemon is alive: its pid file, its process and whether its socket answers.
import { pidAlive } from "@pi-sandbox/vm/process";
import { probeSocket, readPidFile, socketAccepts } from "../probes.js";
import { readJsonLines, writeJsonLine, type DaemonMessage } from "../wire.js";

/** True when `pid` exists and is not a zombie (vm's reader of /proc/<pid>/stat). */
export { pidAlive };
export { readPidFile, socketAccepts };

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
