import { once } from "node:events";
import type { GuestExecution, GuestExitStatus } from "@pi-sandbox/vm";
import { SupervisorError, codeFromAgent, messageOf } from "./errors.js";
import type { SupervisorLogger } from "./logger.js";

/** An asynchronous message from the agent (service start/exit/ready, protocol problems). */
export interface AgentEvent {
  /** Event name: `hello`, `service`, `protocol-error`, `fatal`. */
  event: string;
  /** Event payload. */
  data: Record<string, unknown>;
}

interface Pending {
  op: string;
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

/**
 * Line-delimited JSON over one long-lived guest exec: many requests in flight, answers matched
 * by id, events delivered to listeners in arrival order.
 */
export class AgentChannel {
  private readonly pending = new Map<number, Pending>();
  private readonly listeners = new Set<(event: AgentEvent) => void>();
  private nextId = 1;
  private buffered: Buffer[] = [];
  private closedError: SupervisorError | undefined;
  private exit: GuestExitStatus | undefined;
  private stderrTail = "";
  /** Settles once the guest process has exited and every pending request has been rejected. */
  readonly finished: Promise<void>;

  constructor(
    private readonly execution: GuestExecution,
    private readonly logger: SupervisorLogger,
    private readonly label: string,
  ) {
    execution.stdout.on("data", (chunk: Buffer) => this.onData(chunk));
    execution.stderr.on("data", (chunk: Buffer) => this.onStderr(chunk));
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

  /** Last lines the agent wrote to stderr (tracebacks, diagnostics). */
  get stderr(): string {
    return this.stderrTail;
  }

  /** Subscribes to agent events; returns the unsubscribe function. */
  onEvent(listener: (event: AgentEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Sends one request and resolves with the agent's `result`, or rejects with a SupervisorError. */
  request<T>(op: string, args: Record<string, unknown>, options: RequestOptions = {}): Promise<T> {
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
              `the guest agent did not answer ${op} within ${options.timeoutMs} ms; the guest may be overloaded — retry, or restart the instance if it persists`,
              { details: { op, timeoutMs: options.timeoutMs } },
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

  /** Asks the agent to stop its services and commands and exit; ends stdin. Never throws. */
  async shutdown(deadlineMs: number): Promise<void> {
    if (!this.closedError) {
      const bye = this.request("shutdown", {}, { timeoutMs: deadlineMs }).catch(() => undefined);
      await bye;
    }
    try {
      this.execution.stdin?.end();
    } catch {
      // already gone
    }
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, deadlineMs);
    });
    await Promise.race([this.finished, deadline]);
    if (timer) clearTimeout(timer);
    this.shut(
      new SupervisorError("AGENT_CLOSED", "the supervisor client was closed; start a new one to talk to the guest"),
    );
  }

  private async write(message: unknown): Promise<void> {
    const stdin = this.execution.stdin;
    if (!stdin || stdin.destroyed || stdin.writableEnded) throw new Error("agent stdin is closed");
    if (!stdin.write(`${JSON.stringify(message)}\n`)) await once(stdin, "drain");
  }

  private onData(chunk: Buffer): void {
    let start = 0;
    for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, start)) {
      this.buffered.push(chunk.subarray(start, i));
      const line = Buffer.concat(this.buffered).toString("utf8");
      this.buffered = [];
      start = i + 1;
      this.onLine(line);
    }
    if (start < chunk.length) this.buffered.push(chunk.subarray(start));
  }

  private onLine(line: string): void {
    if (line.trim() === "") return;
    let message: Record<string, unknown>;
    try {
      message = JSON.parse(line) as Record<string, unknown>;
    } catch {
      this.logger.warn(`${this.label} agent wrote a non-protocol line: ${line.slice(0, 200)}`);
      return;
    }
    if (typeof message.event === "string") {
      const event: AgentEvent = { event: message.event, data: (message.data ?? {}) as Record<string, unknown> };
      for (const listener of this.listeners) {
        try {
          listener(event);
        } catch (error) {
          this.logger.warn(`${this.label} event listener failed: ${messageOf(error)}`);
        }
      }
      return;
    }
    const id = message.id;
    const entry = typeof id === "number" ? this.pending.get(id) : undefined;
    if (!entry) return; // aborted or timed out earlier: the answer is no longer wanted
    this.pending.delete(id as number);
    entry.cleanup();
    if (message.ok === true) {
      entry.resolve(message.result ?? {});
      return;
    }
    const error = (message.error ?? {}) as { code?: unknown; message?: unknown; details?: unknown };
    entry.reject(
      new SupervisorError(
        codeFromAgent(error.code),
        typeof error.message === "string" ? error.message : `the guest agent failed ${entry.op}`,
        {
          details: {
            ...((error.details as Record<string, unknown> | undefined) ?? {}),
            op: entry.op,
            agentCode: error.code,
          },
        },
      ),
    );
  }

  private onStderr(chunk: Buffer): void {
    const text = chunk.toString("utf8");
    this.stderrTail = (this.stderrTail + text).slice(-4096);
    for (const line of text.split("\n")) if (line.trim()) this.logger.warn(`${this.label} agent: ${line}`);
  }

  private closedErrorFor(status: GuestExitStatus | undefined, error?: unknown): SupervisorError {
    const how = status
      ? status.signal
        ? `was killed by ${status.signal}`
        : `exited with code ${status.exitCode}`
      : `failed: ${messageOf(error)}`;
    return new SupervisorError(
      "AGENT_CLOSED",
      `the guest agent ${how}; services and commands it supervised are gone — restart the instance`,
      { cause: error, details: { exitCode: status?.exitCode, signal: status?.signal, stderr: this.stderrTail } },
    );
  }

  private shut(error: SupervisorError): void {
    if (!this.closedError) this.closedError = error;
    for (const [id, entry] of this.pending) {
      this.pending.delete(id);
      entry.cleanup();
      entry.reject(this.closedError);
    }
  }

  /** Exit status of the agent process, once it exited. */
  get exitStatus(): GuestExitStatus | undefined {
    return this.exit;
  }
}
