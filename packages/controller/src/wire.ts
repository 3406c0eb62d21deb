// The client-daemon protocol: line-delimited JSON messages over the Unix socket, with a bounded
// line length.
import type { Socket } from "node:net";
import type { ControllerErrorJson } from "./errors.js";
import type { HostGuard } from "./host-guard.js";

/** A progress event streamed during long actions (boot stages, setup output). */
export interface ProgressEvent {
  /** Short machine-readable stage, e.g. `boot`, `setup`, `services`, `checkpoint`. */
  stage: string;
  /** Human-readable line. */
  message: string;
  /** A transfer's bytes done so far (copies: `stage` "copy", `message` the file), with `total`. */
  done?: number;
  /** A transfer's total bytes. */
  total?: number;
}

/** Who makes a call: the model (through Pi's tool), or the user through the CLI, the dashboard, Pi's `/sandbox` or a library. */
export type Caller = "model" | "cli" | "dashboard" | "pi" | "library";

/** A trust decision: what the user was asked (the dialog's lines), the answer, and who could answer. */
export interface TrustNote {
  asked: string[];
  answer: "yes" | "no";
  by: string;
}

/** Messages a client sends. */
export type ClientMessage =
  | {
      id: number;
      type: "call";
      action: Record<string, unknown>;
      /** Present when the call is made for a model: what it may do to host paths. */
      guard?: HostGuard;
      /** Who makes the call, as the client says (for the ledger). */
      caller?: Caller;
      /** What the user was asked before this call was sent, and answered (for the ledger). */
      trust?: TrustNote[];
      /** The machine the call came from over a context (`user@host`, as it says), for the ledger. */
      from?: string;
    }
  | {
      id: number;
      /** A model's call the client refused before sending it: recorded in the ledger, never run. */
      type: "refused";
      action: Record<string, unknown>;
      /** The code it was refused with (CONTROLLER_USER_DECLINED, …). */
      error: string;
      /** What the user was asked, and the no (or that nobody could be asked). */
      trust?: TrustNote[];
      /** The machine the call came from over a context (`user@host`), for the ledger. */
      from?: string;
    }
  | { id: number; type: "ping" };

/** Messages a daemon sends. */
export type DaemonMessage =
  | { id: number; type: "progress"; event: ProgressEvent }
  | { id: number; type: "result"; result: unknown }
  | { id: number; type: "error"; error: ControllerErrorJson }
  | { id: number; type: "pong"; pid: number; state: string; idle?: IdleReading };

/** The daemon's idle clock as a pong reports it (`idle.suspendAfter` set, the VM running). */
export interface IdleReading {
  /** How long nothing has used the instance, in ms; 0 while something does. */
  idleForMs: number;
  /** What uses it now (the last look), when something does: "a preview WebSocket is open", … */
  busy?: string;
}

/** Longest line either side accepts; a write is at most 1 MiB of content, so this leaves room. */
export const MAX_LINE_BYTES = 8 * 1024 * 1024;

/**
 * Splits a socket's bytes into JSON messages, one per line. A line over the limit or one that is
 * not JSON destroys the socket: the peer is not speaking this protocol.
 */
export function readJsonLines<T>(socket: Socket, onMessage: (message: T) => void): void {
  let buffered: Buffer[] = [];
  let size = 0;
  socket.on("data", (chunk: Buffer) => {
    let start = 0;
    for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, start)) {
      buffered.push(chunk.subarray(start, i));
      const line = Buffer.concat(buffered).toString("utf8");
      buffered = [];
      size = 0;
      start = i + 1;
      if (line.trim() === "") continue;
      let message: T;
      try {
        message = JSON.parse(line) as T;
      } catch {
        socket.destroy(new Error("peer sent a line that is not JSON"));
        return;
      }
      onMessage(message);
    }
    if (start < chunk.length) {
      buffered.push(chunk.subarray(start));
      size += chunk.length - start;
      if (size > MAX_LINE_BYTES) socket.destroy(new Error("peer sent an oversized line"));
    }
  });
}

/** Writes one message as a JSON line. */
export function writeJsonLine(socket: Socket, message: ClientMessage | DaemonMessage): void {
  if (!socket.destroyed) socket.write(`${JSON.stringify(message)}\n`);
}
