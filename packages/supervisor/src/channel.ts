// The agent channel: requests and replies over the exec bridge, each reply checked against its
// request; events; a protocol break closes it.
import { once } from "node:events";
import type { GuestExecution, GuestExitStatus } from "@pi-sandbox/vm";
import { checkEvent, type AgentEvent } from "./agent-events.js";
import { AgentLines } from "./agent-lines.js";
import { AgentStderr } from "./agent-stderr.js";
import { SupervisorError, codeFromAgent, messageOf } from "./errors.js";
import type { SupervisorLogger } from "./logger.js";
import { MAX_AGENT_LINE_BYTES } from "./protocol.js";
import { BadReply, boolean, integer, message as messageText, record, safeDetails, text } from "./reply-checks.js";

export type { AgentEvent } from "./agent-events.js";

interface Pending {
  op: string;
  parse(result: unknown): unknown;
  resolve(value: unknown): void;
  reject(error: unknown): void;
  cleanup(): void;
}

/** Options of one request. */
export interface RequestOptions {
  /** Aborting rejects with `signal.reason` at once; the agent's eventual answer is dropped. */
  signal?: AbortSignal;
  /** Rejects with AGENT_UNRESPONSIVE if no answer comes in this time. */
  timeoutMs?: number;
  /** Runs when the caller aborts, e.g. to tell the agent to cancel the work. */
  onAbort?: () => void;
}

/** How long an agent that broke the protocol gets to stop its services on its own before its exec is killed. */
const PROTOCOL_ERROR_GRACE_MS = 10_000;
/** `protocol-error` events logged per channel (the host never sends what causes them; a flood is the guest's). */
const PROTOCOL_NOTES_LOGGED = 20;

/** What to do once this client closed or detached: the channel is never reopened. */
const NEW_CLIENT_HINT = "start a new supervisor client to talk to the guest";

/** Builds the AGENT_PROTOCOL error the channel closes with. */
export function protocolError(problem: string, details: Record<string, unknown> = {}): SupervisorError {
  return new SupervisorError(
    "AGENT_PROTOCOL",
    `the guest agent broke the protocol (${problem}); the channel is closed and its services are being stopped`,
    { hint: "start a new supervisor client or restart the instance", details: { problem, ...details } },
  );
}

/**
 * Line-delimited JSON over one long-lived guest exec: many requests in flight, answers matched
 * by id and checked by the caller's parser, events delivered to listeners in arrival order.
 * Nothing the guest writes is trusted: lines are bounded, and a reply that breaks the protocol
 * closes the channel with AGENT_PROTOCOL (see `fail`).
 */
export class AgentChannel {
  private readonly pending = new Map<number, Pending>();
  private readonly listeners = new Set<(event: AgentEvent) => void>();
  private readonly closeListeners = new Set<(reason: SupervisorError) => void>();
  private nextId = 1;
  private readonly lines: AgentLines;
  private helloSeen = false;
  private protocolNotes = 0;
  private closedError: SupervisorError | undefined;
  private exit: GuestExitStatus | undefined;
  private readonly stderrSink: AgentStderr;
  /** Settles once the guest process has exited and every pending request has been rejected. */
  readonly finished: Promise<void>;

  constructor(
    private readonly execution: GuestExecution,
    private readonly logger: SupervisorLogger,
    private readonly label: string,
    /** Ends the agent's exec for good (the client aborts it). */
    private readonly kill: (reason: SupervisorError) => void = () => undefined,
  ) {
    this.stderrSink = new AgentStderr((line) => this.logger.warn(`${this.label} agent: ${line}`));
    this.lines = new AgentLines(
      (line) => this.onLine(line),
      () =>
        this.fail(
          protocolError(`a line longer than ${MAX_AGENT_LINE_BYTES} bytes`, { maxLineBytes: MAX_AGENT_LINE_BYTES }),
        ),
    );
    execution.stdout.on("data", (chunk: Buffer) => this.lines.push(chunk));
    execution.stderr.on("data", (chunk: Buffer) => this.stderrSink.push(chunk));
    execution.stdin?.on("error", (error: unknown) =>
      this.logger.warn(`${this.label} agent stdin: ${messageOf(error)}`),
    );
    this.finished = execution.result.then(
      (status) => {
        this.exit = status;
        this.shut(this.closedErrorFor(status));
      },
      (error: unknown) => this.shut(this.closedErrorFor(undefined, error)),
    );
  }

  /** True once the agent process is gone or the channel was shut. */
  get closed(): boolean {
    return this.closedError !== undefined;
  }

  /** Why the channel closed (AGENT_PROTOCOL, AGENT_CLOSED), or undefined while it is open. */
  get closedReason(): SupervisorError | undefined {
    return this.closedError;
  }

  /** The last 4 KiB the agent wrote to stderr (tracebacks, diagnostics). */
  get stderr(): string {
    return this.stderrSink.text;
  }

  /** Subscribes to agent events; returns the unsubscribe function. */
  onEvent(listener: (event: AgentEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Calls `listener` once when the channel closes, with the reason; returns the unsubscribe function. */
  onClosed(listener: (reason: SupervisorError) => void): () => void {
    if (this.closedError) {
      const reason = this.closedError;
      queueMicrotask(() => listener(reason));
      return () => undefined;
    }
    this.closeListeners.add(listener);
    return () => this.closeListeners.delete(listener);
  }

  /**
   * Sends one request; resolves with the agent's `result` as `parse` returns it, or rejects with
   * a SupervisorError. `parse` throws BadReply when the result is not what was asked for: the
   * channel then closes with AGENT_PROTOCOL.
   */
  request<T>(
    op: string,
    args: Record<string, unknown>,
    parse: (result: unknown) => T,
    options: RequestOptions = {},
  ): Promise<T> {
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.closedError) return Promise.reject(this.closedError);
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const onAbort = (): void => {
        this.pending.get(id)?.cleanup();
        this.pending.delete(id);
        try {
          options.onAbort?.();
        } catch (error) {
          this.logger.warn(`${this.label} cancelling ${op}: ${messageOf(error)}`);
        }
        reject(signal?.reason);
      };
      const entry: Pending = {
        op,
        parse,
        resolve: (value) => resolve(value as T),
        reject,
        cleanup: () => {
          if (timer) clearTimeout(timer);
          signal?.removeEventListener("abort", onAbort);
        },
      };
      this.pending.set(id, entry);
      signal?.addEventListener("abort", onAbort, { once: true });
      if (options.timeoutMs !== undefined) {
        timer = setTimeout(() => {
          if (!this.pending.delete(id)) return;
          entry.cleanup();
          reject(
            new SupervisorError(
              "AGENT_UNRESPONSIVE",
              `the guest agent did not answer ${op} within ${options.timeoutMs} ms; the guest may be overloaded`,
              { hint: "retry, or restart the instance if it persists", details: { op, timeoutMs: options.timeoutMs } },
            ),
          );
        }, options.timeoutMs);
        timer.unref?.();
      }
      this.write({ id, op, args }).catch((error: unknown) => {
        if (!this.pending.delete(id)) return;
        entry.cleanup();
        reject(
          this.closedError ??
            new SupervisorError("AGENT_CLOSED", `could not send ${op} to the guest agent`, { cause: error }),
        );
      });
    });
  }

  /**
   * Closes the channel because the agent broke the protocol: every pending and later request
   * rejects with `error`, nothing more from the agent is read, and the agent's stdin is ended so it
   * stops its services and exits; its exec is killed if it is still there after a grace period.
   */
  fail(error: SupervisorError): void {
    if (this.closedError) return;
    this.lines.discard();
    this.logger.warn(`${this.label} ${error.message}`);
    this.shut(error);
    this.endStdin();
    const timer = setTimeout(() => {
      if (!this.exit) this.kill(error);
    }, PROTOCOL_ERROR_GRACE_MS);
    timer.unref?.();
    void this.finished.then(() => clearTimeout(timer));
  }

  /** Asks the agent to stop its services and commands and exit; ends stdin. Never throws. */
  async shutdown(deadlineMs: number): Promise<void> {
    if (!this.closedError) {
      await this.request("shutdown", {}, () => undefined, { timeoutMs: deadlineMs }).catch(() => undefined);
    }
    await this.end(deadlineMs, "the supervisor client was closed");
  }

  /**
   * Ends stdin without asking anything: the bridge exec ends and the agent daemon behind it keeps
   * running with its services. Never throws.
   */
  async detach(deadlineMs: number): Promise<void> {
    // Shut first: the bridge's own exit that follows is not the agent's.
    const message = "the supervisor client detached";
    this.shut(new SupervisorError("AGENT_CLOSED", message, { hint: NEW_CLIENT_HINT }));
    await this.end(deadlineMs, message);
  }

  /** Ends stdin, waits (bounded) for the exec to end, then shuts the channel with AGENT_CLOSED. */
  private async end(deadlineMs: number, message: string): Promise<void> {
    this.endStdin();
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, deadlineMs);
    });
    await Promise.race([this.finished, deadline]);
    if (timer) clearTimeout(timer);
    this.shut(new SupervisorError("AGENT_CLOSED", message, { hint: NEW_CLIENT_HINT }));
  }

  /** Exit status of the agent process, once it exited. */
  get exitStatus(): GuestExitStatus | undefined {
    return this.exit;
  }

  private endStdin(): void {
    try {
      this.execution.stdin?.end();
    } catch {
      // already gone
    }
  }

  private async write(message: unknown): Promise<void> {
    const stdin = this.execution.stdin;
    if (!stdin || stdin.destroyed || stdin.writableEnded) throw new Error("agent stdin is closed");
    if (!stdin.write(`${JSON.stringify(message)}\n`)) await once(stdin, "drain");
  }

  private onLine(line: string): void {
    if (line.trim() === "") return;
    let message: Record<string, unknown>;
    try {
      message = record(JSON.parse(line), "line");
    } catch {
      this.fail(protocolError("a line that is not a JSON object", { line: line.slice(0, 200) }));
      return;
    }
    try {
      if (message.event !== undefined) this.onEventMessage(message);
      else this.onReply(message);
    } catch (error) {
      if (!(error instanceof BadReply)) throw error;
      this.fail(protocolError(error.message));
    }
  }

  private onReply(message: Record<string, unknown>): void {
    const id = integer(message.id, "reply id", 1, this.nextId - 1);
    const ok = boolean(message.ok, "reply ok");
    const entry = this.pending.get(id);
    if (!entry) return; // aborted or timed out earlier: the answer is no longer wanted
    if (ok) {
      let value: unknown;
      try {
        value = entry.parse(message.result);
      } catch (error) {
        if (!(error instanceof BadReply)) throw error;
        throw new BadReply(`the ${entry.op} reply:`, error.message);
      }
      this.pending.delete(id);
      entry.cleanup();
      entry.resolve(value);
      return;
    }
    const error = record(message.error, `${entry.op} error`);
    const agentCode = text(error.code, `${entry.op} error code`, 64);
    const errorMessage = messageText(error.message, `${entry.op} error message`);
    this.pending.delete(id);
    entry.cleanup();
    entry.reject(
      new SupervisorError(codeFromAgent(agentCode), errorMessage || `the guest agent failed ${entry.op}`, {
        details: { ...safeDetails(error.details), op: entry.op, agentCode },
      }),
    );
  }

  private onEventMessage(message: Record<string, unknown>): void {
    const event = checkEvent(message);
    if (event.event === "hello") {
      if (this.helloSeen) throw new BadReply("hello event", "came twice");
      this.helloSeen = true;
    } else if (event.event === "protocol-error") {
      this.protocolNotes++;
      if (this.protocolNotes <= PROTOCOL_NOTES_LOGGED) {
        this.logger.warn(`${this.label} the agent reported a protocol problem: ${String(event.data.message)}`);
      }
    }
    for (const listener of this.listeners) {
      try {
        listener(event);
      } catch (error) {
        this.logger.warn(`${this.label} event listener failed: ${messageOf(error)}`);
      }
    }
  }

  private closedErrorFor(status: GuestExitStatus | undefined, error?: unknown): SupervisorError {
    const how = status
      ? status.signal
        ? `was killed by ${status.signal}`
        : `exited with code ${status.exitCode}`
      : `failed: ${messageOf(error)}`;
    return new SupervisorError("AGENT_CLOSED", `the guest agent ${how}; services and commands it supervised are gone`, {
      hint: "restart the instance",
      cause: error,
      details: { exitCode: status?.exitCode, signal: status?.signal, stderr: this.stderr },
    });
  }

  private shut(error: SupervisorError): void {
    const first = !this.closedError;
    if (first) this.closedError = error;
    for (const [id, entry] of this.pending) {
      this.pending.delete(id);
      entry.cleanup();
      entry.reject(this.closedError);
    }
    if (!first) return;
    const reason = this.closedError!;
    for (const listener of this.closeListeners) {
      try {
        listener(reason);
      } catch (listenerError) {
        this.logger.warn(`${this.label} close listener failed: ${messageOf(listenerError)}`);
      }
    }
    this.closeListeners.clear();
  }
}
