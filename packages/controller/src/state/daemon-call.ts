// The calling side of a daemon's Unix socket: checks the socket is ours, sends one call, streams
// its progress and rebuilds its result or error. The client calls through it, and so does a daemon
// that needs another instance's (diff --against).
import { lstat } from "node:fs/promises";
import { connect, type Socket } from "node:net";
import { dirname } from "node:path";
import { ControllerError, type ControllerErrorJson } from "../errors.js";
import { assertPrivateDir } from "./layout.js";
import {
  readJsonLines,
  writeJsonLine,
  type Caller,
  type DaemonMessage,
  type ProgressEvent,
  type TrustNote,
} from "../wire.js";
import type { HostGuard } from "../host-guard.js";

/** Options of one call to a daemon. */
export interface DaemonCallOptions {
  /** Ends the wait (not the daemon's work) with `signal.reason`. */
  signal?: AbortSignal;
  /** Receives progress events of long actions. */
  onProgress?: (event: ProgressEvent) => void;
  /** The host-path limits of a model's call, sent beside the action. */
  guard?: HostGuard;
  /** Who makes the call, and what the user granted for it (for the ledger). */
  caller?: Caller;
  trust?: TrustNote[];
  /** Sends a model's call the client refused, with this code, for the ledger only: nothing runs. */
  refused?: string;
  /** The machine the call came from over a context (`user@host`), for the ledger. */
  from?: string;
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

function notRunning(action: Record<string, unknown>, cause: unknown): ControllerError {
  return new ControllerError("CONTROLLER_NOT_RUNNING", "the instance is not running", {
    hint: `Start it with {"action":"start","name":"${String(action.name)}"}.`,
    details: { name: action.name },
    cause,
  });
}

/**
 * Checks who listens on `socketPath` before anything is sent to it. Node has no API for the
 * peer's credentials (SO_PEERCRED), so the socket file stands in for them: bind() creates it
 * owned by the listener's uid, and in a directory only we can write to (owned by us, no
 * group/other bits, not a symlink) nobody else can put a socket or rename one into place. A
 * socket file and directory that are ours therefore mean a listener running as us (or root).
 */
export async function assertOwnListener(socketPath: string): Promise<void> {
  if (typeof process.getuid !== "function") return;
  await assertPrivateDir(dirname(socketPath));
  const uid = process.getuid();
  const info = await lstat(socketPath);
  if (!info.isSocket() || info.uid !== uid) {
    const what = info.isSocket() ? `belongs to uid ${info.uid}, not to you (uid ${uid})` : "is not a socket";
    throw new ControllerError(
      "CONTROLLER_STATE_INSECURE",
      `the controller socket ${socketPath} ${what}; nothing was sent to it`,
      {
        hint: `Another local user may be posing as the controller: have ${socketPath} removed, or set PI_SANDBOX_HOME (and TMPDIR) to shorter directories you own.`,
        details: { socketPath, uid: info.uid },
      },
    );
  }
}

/**
 * Sends one action to the daemon at `socketPath` and resolves with its result. The listener is
 * checked first ({@link assertOwnListener}); a socket that is not ours gets nothing.
 */
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
    socket.once("connect", () => {
      assertOwnListener(socketPath).then(
        () => {
          if (settled) return;
          // Read only from a listener that passed the check: an impostor's early "result" is
          // never taken for an answer. (Our daemon speaks only after the call.)
          readJsonLines<DaemonMessage>(socket, (message) => {
            if (message.id !== 1) return;
            if (message.type === "progress") onProgress?.(message.event);
            else if (message.type === "result") finish(() => resolve(message.result));
            else if (message.type === "error")
              finish(() => reject(ControllerError.fromJSON(message.error as ControllerErrorJson)));
          });
          const trust = {
            ...(options.trust?.length ? { trust: options.trust } : {}),
            ...(options.from ? { from: options.from } : {}),
          };
          writeJsonLine(
            socket,
            options.refused !== undefined
              ? { id: 1, type: "refused", action, error: options.refused, ...trust }
              : {
                  id: 1,
                  type: "call",
                  action,
                  ...(options.guard ? { guard: options.guard } : {}),
                  ...(options.caller ? { caller: options.caller } : {}),
                  ...trust,
                },
          );
        },
        // A socket removed since the connect is a daemon that is exiting: retried like no daemon.
        (error: NodeJS.ErrnoException) =>
          finish(() => reject(error.code === "ENOENT" ? notRunning(action, error) : error)),
      );
    });
    socket.once("error", (error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT" || error.code === "ECONNREFUSED") finish(() => reject(notRunning(action, error)));
      else finish(() => reject(lost(socketPath, error)));
    });
    socket.once("close", () => finish(() => reject(lost(socketPath))));
  });
}
