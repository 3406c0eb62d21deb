// The laptop's end of a context: one `ssh HOST pi-sandbox system dial-stdio` per process (through
// the context's master, so it opens at once after the first), the hello, and calls by id over it.
// While no call is waiting the child does not hold the process open; when ssh goes away every
// waiting call fails with CONTROLLER_CONTEXT_LOST and the next one opens a new connection.

import { spawn } from "node:child_process";
import type { Readable, Writable } from "node:stream";
import { ControllerError, type ControllerErrorJson } from "../errors.js";
import type { SshTarget } from "../state/contexts.js";
import type { ProgressEvent } from "../wire.js";
import { hello, readLines, sameVersion, versionMismatch, writeLine, type Hello, type RemoteReply } from "./protocol.js";
import type { RemoteCall, RemoteRequest } from "./protocol.js";
import { traceMark } from "../trace.js";
import {
  ensureControlDir,
  masterPid,
  masterRunsSync,
  privateControlDirSync,
  remoteProgram,
  sshArgs,
  sshProgram,
  startMaster,
  unreachable,
} from "./ssh.js";

/** How long the hello may take (a first ssh login included). */
const HELLO_TIMEOUT_MS = 60_000;

/** What a waiting call is told. */
interface Waiting {
  resolve(result: unknown): void;
  reject(error: unknown): void;
  onProgress?: (event: ProgressEvent) => void;
}

/** A connection to one context over a pair of streams (ssh's stdio, or a test's). */
export class RemoteConnection {
  readonly context: string;
  /**
   * Set when this connection started the context's ssh master: the previews forwarded by an
   * earlier one went with it, and the first call forwards them again.
   */
  newMaster = false;
  /**
   * Previews (`address:port`) this connection had the master forward. It runs over that master
   * and ends with it, so these stay forwarded while it lives and only others need asking for (an
   * ssh process each); a new connection starts with none.
   */
  readonly forwarded = new Set<string>();
  #output: Writable;
  #waiting = new Map<number, Waiting>();
  #nextId = 1;
  #closed: ControllerError | undefined;
  #hold: (held: boolean) => void;

  private constructor(context: string, output: Writable, hold: (held: boolean) => void) {
    this.context = context;
    this.#output = output;
    this.#hold = hold;
  }

  /**
   * Greets the far end over `input`/`output` and resolves once it answered with the same
   * version. `hold(true)` while a call waits (the process must stay up), `hold(false)` otherwise;
   * `why()` explains a close (ssh's stderr).
   */
  static open(
    context: string,
    input: Readable,
    output: Writable,
    options: { hold?: (held: boolean) => void; why?: () => string } = {},
  ): Promise<RemoteConnection> {
    const connection = new RemoteConnection(context, output, options.hold ?? (() => {}));
    return new Promise((resolve, reject) => {
      let greeted = false;
      const timer = setTimeout(() => {
        reject(unreachable(`connecting to context ${context}`, `no answer within ${HELLO_TIMEOUT_MS / 1000} s`));
        input.destroy();
      }, HELLO_TIMEOUT_MS);
      readLines<RemoteReply>(input, (message) => {
        if (!greeted) {
          clearTimeout(timer);
          if (message.type !== "hello") {
            reject(unreachable(`connecting to context ${context}`, "the far end does not speak pi-sandbox's protocol"));
            return void input.destroy();
          }
          if (!sameVersion(message as Hello)) {
            reject(versionMismatch(context, message as Hello));
            return void input.destroy();
          }
          greeted = true;
          traceMark(`context: ${context} greeted`);
          connection.#hold(false);
          return resolve(connection);
        }
        if (message.type === "hello" || message.type === "pong") return;
        const waiting = connection.#waiting.get(message.id);
        if (!waiting) return;
        if (message.type === "progress") return waiting.onProgress?.(message.event);
        connection.#settle(message.id);
        if (message.type === "result") waiting.resolve(message.result);
        else waiting.reject(ControllerError.fromJSON(message.error as ControllerErrorJson));
      });
      const closed = () => {
        clearTimeout(timer);
        const why = options.why?.().trim();
        if (!greeted) {
          reject(unreachable(`connecting to context ${context}`, why || "the connection closed"));
          return;
        }
        connection.#lose(why);
      };
      input.once("close", closed);
      input.once("error", () => {});
      output.once("error", () => {});
      connection.#hold(true);
      writeLine(output, hello());
    });
  }

  /** True once the connection is gone. */
  get closed(): boolean {
    return this.#closed !== undefined;
  }

  #settle(id: number): void {
    this.#waiting.delete(id);
    if (this.#waiting.size === 0) this.#hold(false);
  }

  #lose(why: string | undefined): void {
    this.#closed = new ControllerError(
      "CONTROLLER_CONTEXT_LOST",
      `the connection to context ${this.context} was lost${why ? ` (${why.split("\n").at(-1)})` : ""}`,
      {
        hint: "What was running there goes on (instances, commands). Run the command again: it reconnects; follow a command with exec-status and its handle.",
        details: { context: this.context },
      },
    );
    for (const [id, waiting] of this.#waiting) {
      this.#waiting.delete(id);
      waiting.reject(this.#closed);
    }
    this.#hold(false);
  }

  /** Sends one request and resolves with its result. */
  request(
    message: Omit<RemoteCall, "id"> | { type: "stage" } | { type: "unstage"; dir: string },
    options: { signal?: AbortSignal; onProgress?: (event: ProgressEvent) => void } = {},
  ): Promise<unknown> {
    if (this.#closed) return Promise.reject(this.#closed);
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        this.#settle(id);
        writeLine(this.#output, { id, type: "cancel" });
        reject(signal?.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      const done =
        <T>(fn: (value: T) => void) =>
        (value: T) => {
          signal?.removeEventListener("abort", onAbort);
          fn(value);
        };
      this.#waiting.set(id, {
        resolve: done(resolve),
        reject: done(reject),
        ...(options.onProgress ? { onProgress: options.onProgress } : {}),
      });
      this.#hold(true);
      writeLine(this.#output, { ...message, id } as RemoteRequest);
    });
  }
}

/** The remote command: `pi-sandbox system dial-stdio`. */
function remoteCommand(env: NodeJS.ProcessEnv): string[] {
  return [remoteProgram(env), "system", "dial-stdio"];
}

/** This process's open connections, by context; `claim` makes one opened early hold the process. */
const open = new Map<string, { opening: Promise<RemoteConnection>; claim?: () => void }>();

/**
 * The connection to `target` (named `name`), opened through ssh when none is open. `early`: opened
 * ahead of the call that will use it (remote/early-connect.ts), so its ssh and the far side's start
 * run while this process loads; until a call claims it, it does not keep the process alive, and a
 * failure waits for that call to report it.
 */
export async function connectContext(
  name: string,
  target: SshTarget,
  env: NodeJS.ProcessEnv,
  options: { early?: boolean } = {},
): Promise<RemoteConnection> {
  const known = open.get(name);
  if (known && options.early) return known.opening;
  if (known?.claim) {
    // Opened early: this call takes it, and its failure to open is this call's.
    known.claim();
    delete known.claim;
    known.opening.catch(() => open.delete(name));
    const connection = await known.opening;
    if (!connection.closed) return connection;
    open.delete(name);
  } else if (known) {
    const connection = await known.opening.catch(() => undefined);
    if (connection && !connection.closed) return connection;
    open.delete(name);
  }
  let claimed = options.early !== true;
  let greeting = true;
  const handles: { ref(): void; unref(): void }[] = [];
  const hold = (held: boolean) => {
    for (const handle of handles) {
      if (held && claimed) handle.ref();
      else handle.unref();
    }
  };
  const opening = (async () => {
    traceMark(`context: ${name} connecting`);
    // Early, up to the session's spawn without waiting for the event loop (the CLI's modules load).
    const early = options.early ? privateControlDirSync(env) : undefined;
    const dir = early ?? (await ensureControlDir(env));
    const newMaster = early ? !masterRunsSync(target, dir, env) : (await masterPid(target, dir, env)) === undefined;
    traceMark(`context: ${name} master checked`);
    if (newMaster) await startMaster(target, dir, env, `connecting to context ${name}`);
    // The session goes through the master, in a process group of its own: a Ctrl-C at the terminal
    // is this process's to handle (an exec's kill is sent through this very session), and would
    // end an ssh of the terminal's group at once.
    const child = spawn(sshProgram(env), [...sshArgs(target, dir, ["-T"]), ...remoteCommand(env)], {
      stdio: ["pipe", "pipe", "pipe"],
      env,
      detached: true,
    });
    handles.push(...([child, child.stdout, child.stderr, child.stdin] as { ref(): void; unref(): void }[]));
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (c: string) => (stderr = (stderr + c).slice(-4000)));
    child.once("error", (error) => {
      stderr += `could not run ${sshProgram(env)}: ${error.message}`;
      child.stdout.destroy();
    });
    const connection = await RemoteConnection.open(name, child.stdout, child.stdin, {
      hold: (held) => {
        greeting &&= held;
        hold(held);
      },
      why: () => stderr,
    });
    connection.newMaster = newMaster;
    return connection;
  })();
  if (claimed) {
    open.set(name, { opening });
    opening.catch(() => open.delete(name));
  } else {
    opening.catch(() => undefined);
    open.set(name, {
      opening,
      claim: () => {
        claimed = true;
        // Still greeting: the process now waits for the hello.
        if (greeting) hold(true);
      },
    });
  }
  return opening;
}
