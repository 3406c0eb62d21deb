import { connect, type Socket } from "node:net";
import { ControllerError, type ControllerErrorJson } from "../errors.js";
import { readJsonLines, writeJsonLine, type DaemonMessage, type ProgressEvent } from "../wire.js";

/** Options of one call to a daemon. */
export interface DaemonCallOptions {
  /** Ends the wait (not the daemon's work) with `signal.reason`. */
  signal?: AbortSignal;
  /** Receives progress events of long actions. */
  onProgress?: (event: ProgressEvent) => void;
}

function lost(socketPath: string, cause?: unknown): ControllerError {
  return new ControllerError(
    "CONTROLLER_DAEMON_LOST",
    "the instance's controller closed the connection before answering",
    {
      hint: "Check the controller log with the logs action, then inspect the instance; start reopens the last checkpoint.",
      details: { socketPath },
      cause,
    },
  );
}

/** Sends one action to the daemon at `socketPath` and resolves with its result. */
export function callDaemon(
  socketPath: string,
  action: Record<string, unknown>,
  options: DaemonCallOptions = {},
): Promise<unknown> {
  const { signal, onProgress } = options;
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const socket: Socket = connect(socketPath);
    let settled = false;
    const finish = (fn: () => void) => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      socket.destroy();
      fn();
    };
    const onAbort = () => finish(() => reject(signal?.reason));
    signal?.addEventListener("abort", onAbort, { once: true });
    socket.once("connect", () => writeJsonLine(socket, { id: 1, type: "call", action }));
    readJsonLines<DaemonMessage>(socket, (message) => {
      if (message.id !== 1) return;
      if (message.type === "progress") onProgress?.(message.event);
      else if (message.type === "result") finish(() => resolve(message.result));
      else if (message.type === "error")
        finish(() => reject(ControllerError.fromJSON(message.error as ControllerErrorJson)));
    });
    socket.once("error", (error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT" || error.code === "ECONNREFUSED") {
        finish(() =>
          reject(
            new ControllerError("CONTROLLER_NOT_RUNNING", "the instance is not running", {
              hint: `Start it with {"action":"start","name":"${String(action.name)}"}.`,
              details: { name: action.name },
              cause: error,
            }),
          ),
        );
      } else finish(() => reject(lost(socketPath, error)));
    });
    socket.once("close", () => finish(() => reject(lost(socketPath))));
  });
}
