// What the laptop and `pi-sandbox system dial-stdio` on another machine say over one ssh channel:
// JSON lines, a hello each way first (the two versions must be the same), then calls by id, each
// answered with progress, a result or an error as a daemon answers the client. A call may carry
// the config text read on the laptop and the secret values resolved there (kept in the remote
// controller's memory: its environment, never a file). Staging directories hold the bytes of a
// copy while scp moves them.

import { readFileSync } from "node:fs";
import type { Readable, Writable } from "node:stream";
import type { Socket } from "node:net";
import { ControllerError } from "../errors.js";
import { readJsonLines } from "../wire.js";
import type { Caller, DaemonMessage, TrustNote } from "../wire.js";

/** Bumped when the messages change shape; the version check catches the rest. */
export const REMOTE_PROTOCOL = 1;

/** This package's version, which both sides must share. */
export function controllerVersion(): string {
  // src/remote/ and dist/remote/ are both two levels below the package root.
  return (JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string })
    .version;
}

/** The first line each side sends. */
export interface Hello {
  type: "hello";
  protocol: number;
  version: string;
}

/** One action for the remote to run. */
export interface RemoteCall {
  id: number;
  type: "call";
  action: Record<string, unknown>;
  /** Who makes the call on the laptop, for the remote's ledger (and its own check of a model's call). */
  caller: Caller;
  /** The laptop as `user@host`, for the remote's ledger. */
  from?: string;
  trust?: TrustNote[];
  /** The sandbox.yaml as read on the laptop: written to a private file there, and `action.config` names it. */
  config?: { text: string; name: string };
  /** Secret values resolved on the laptop, by the environment variable the shipped config names. */
  secrets?: Record<string, string>;
}

/** Laptop to remote. */
export type RemoteRequest =
  | Hello
  | RemoteCall
  /** Stop waiting for call `id` (Ctrl-C); the work already handed to a daemon goes on. */
  | { id: number; type: "cancel" }
  /** A new private directory for a copy's bytes. */
  | { id: number; type: "stage" }
  /** Remove a staging directory this session made. */
  | { id: number; type: "unstage"; dir: string };

/** Remote to laptop. */
export type RemoteReply = Hello | DaemonMessage;

/** The version mismatch, with the command that fixes it. */
export function versionMismatch(context: string, remote: Hello, local = controllerVersion()): ControllerError {
  const newer = remote.version.localeCompare(local, undefined, { numeric: true }) > 0;
  return new ControllerError(
    "CONTROLLER_CONTEXT_VERSION_MISMATCH",
    `context ${context} runs pi-sandbox ${remote.version} (protocol ${remote.protocol}); this machine runs ${local} (protocol ${REMOTE_PROTOCOL})`,
    {
      hint: newer
        ? `Upgrade this machine: npm i -g @pi-sandbox/controller@${remote.version}`
        : `Upgrade the other machine: ssh it and run npm i -g @pi-sandbox/controller@${local}`,
      details: { context, remote: remote.version, local },
    },
  );
}

/** True when the other side speaks this very version. */
export function sameVersion(hello: Hello): boolean {
  return hello.protocol === REMOTE_PROTOCOL && hello.version === controllerVersion();
}

/** This side's hello. */
export function hello(): Hello {
  return { type: "hello", protocol: REMOTE_PROTOCOL, version: controllerVersion() };
}

/** Reads JSON lines from `input` with the client protocol's line limit; bad input destroys it. */
export function readLines<T>(input: Readable, onMessage: (message: T) => void): void {
  // readJsonLines reads "data" and calls destroy(), which every Readable has.
  readJsonLines<T>(input as unknown as Socket, onMessage);
}

/** Writes one message as a JSON line. */
export function writeLine(output: Writable, message: RemoteRequest | RemoteReply): void {
  if (!output.destroyed && output.writable) output.write(`${JSON.stringify(message)}\n`);
}
