// `pi-sandbox system dial-stdio`: the far end of a context. Reads the laptop's requests from
// stdin, runs each action here through the same client the local CLI uses (this machine's state,
// its daemons), and writes the answers to stdout. The laptop has made its trust decisions before
// a call arrives; the action runs as this account's user would run it, and the ledger here names
// the laptop's caller and machine ("model via context from me@laptop"): a model's call to an
// action for the user only is refused here too, whatever the laptop let through. Nothing a call
// carries is logged: a secret value goes into the environment of the call (and so of a daemon it
// starts) only, and a shipped config into a private file removed when the call ends.

import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import type { Readable, Writable } from "node:stream";
import { ControllerError, isControllerError } from "../errors.js";
import type { ProgressEvent } from "../wire.js";
import type { Caller } from "../wire.js";
import { traceMark } from "../trace.js";
import {
  hello,
  readLines,
  sameVersion,
  versionMismatch,
  writeLine,
  type RemoteCall,
  type RemoteRequest,
} from "./protocol.js";

/** How the server runs one action: `callAction` with these options. */
export type ServeCall = (
  action: Record<string, unknown>,
  options: {
    env: NodeJS.ProcessEnv;
    cwd: string;
    signal: AbortSignal;
    onProgress: (event: ProgressEvent) => void;
    /** Who made the call on the laptop, and the laptop (`user@host`). */
    relayed: { caller: Caller; from: string };
  },
) => Promise<unknown>;

const CALLERS: readonly Caller[] = ["model", "cli", "dashboard", "pi", "library"];

/** The laptop's word for who called, and for itself, as the ledger here keeps them. */
function relayedOf(message: RemoteCall): { caller: Caller; from: string } {
  const caller = CALLERS.includes(message.caller) ? message.caller : "library";
  const from = typeof message.from === "string" && /^[\x21-\x7e]{1,255}$/.test(message.from) ? message.from : "unknown";
  return { caller, from };
}

/** A private directory for this session's files (mkdtemp makes it 0700). */
function newStage(): Promise<string> {
  return mkdtemp(join(tmpdir(), "pi-sandbox-stage-"));
}

/**
 * Serves requests from `input` until it ends; resolves then. Calls still running are left to
 * their daemons: only the waits end.
 */
export function serveStdio(
  input: Readable,
  output: Writable,
  call: ServeCall,
  env: NodeJS.ProcessEnv = process.env,
): Promise<void> {
  const running = new Map<number, AbortController>();
  const stages = new Set<string>();
  let greeted = false;
  const reply = (id: number, run: () => Promise<unknown>) => {
    run().then(
      (result) => {
        traceMark("dial-stdio: answered");
        writeLine(output, { id, type: "result", result });
      },
      (error: unknown) => {
        const coded = isControllerError(error)
          ? error
          : new ControllerError("CONTROLLER_INTERNAL", (error as Error)?.message ?? String(error));
        writeLine(output, { id, type: "error", error: coded.toJSON() });
      },
    );
  };
  const runCall = async (message: RemoteCall): Promise<unknown> => {
    const abort = new AbortController();
    running.set(message.id, abort);
    let stage: string | undefined;
    let completed = false;
    try {
      const action = { ...message.action };
      if (message.config) {
        stage = await newStage();
        const path = join(stage, basename(message.config.name) || "sandbox.yaml");
        await writeFile(path, message.config.text, { mode: 0o600 });
        action.config = path;
      }
      const result = await call(action, {
        env: { ...env, ...message.secrets },
        cwd: stage ?? env.HOME ?? tmpdir(),
        signal: abort.signal,
        onProgress: (event) => writeLine(output, { id: message.id, type: "progress", event }),
        relayed: relayedOf(message),
      });
      completed = true;
      return result;
    } catch (error) {
      completed = !abort.signal.aborted;
      throw error;
    } finally {
      running.delete(message.id);
      // A wait that ended early leaves the config for the daemon still reading it (tmpdir's to clean).
      if (stage && completed) await rm(stage, { recursive: true, force: true });
    }
  };
  return new Promise((resolve) => {
    readLines<RemoteRequest>(input, (message) => {
      if (!greeted) {
        if (message.type !== "hello") return void input.destroy(new Error("the first line is not a hello"));
        traceMark("dial-stdio: hello");
        writeLine(output, hello());
        // A laptop of another version learns this one's from the hello and says what fixes it.
        if (!sameVersion(message)) return void input.destroy(versionMismatch("this", message));
        greeted = true;
        return;
      }
      switch (message.type) {
        case "call":
          traceMark(`dial-stdio: call ${String(message.action.action)}`);
          return reply(message.id, () => runCall(message));
        case "cancel":
          return running.get(message.id)?.abort(new Error("cancelled by the laptop"));
        case "stage":
          return reply(message.id, async () => {
            const dir = await newStage();
            stages.add(dir);
            return { dir };
          });
        case "unstage":
          return reply(message.id, async () => {
            if (!stages.delete(message.dir)) return { removed: false };
            await rm(message.dir, { recursive: true, force: true });
            return { removed: true };
          });
      }
    });
    let ended = false;
    const done = () => {
      if (ended) return;
      ended = true;
      for (const abort of running.values()) abort.abort(new Error("the laptop went away"));
      void Promise.all([...stages].map((dir) => rm(dir, { recursive: true, force: true }))).then(() => resolve());
    };
    input.once("close", done);
    input.once("end", done);
    input.once("error", done);
  });
}
