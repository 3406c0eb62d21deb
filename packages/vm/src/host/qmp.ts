// A QMP monitor client: commands to QEMU and its events (I/O-error pauses).
import net from "node:net";

/** What QEMU said when it paused the guest on a failed disk request (`BLOCK_IO_ERROR` data). */
export interface IoErrorPause {
  /** True when the host write failed with ENOSPC (the host file system is full). */
  nospace: boolean | undefined;
  /** QEMU's text for the host error, e.g. "No space left on device". */
  reason: string | undefined;
  /** `read` or `write`. */
  operation: string | undefined;
  /** The QEMU drive id (Gondolin's root disk is `drive0`). */
  device: string | undefined;
}

/** Options of a {@link QmpMonitor}. */
export interface QmpMonitorOptions {
  /** Called (possibly more than once) when QEMU has paused the guest because a disk request failed. */
  onIoErrorPause: (pause: IoErrorPause) => void;
  /** Called when QEMU stopped the guest on a KVM internal error (run state `internal-error`). */
  onInternalError?: () => void;
  /** Give up connecting after this long (default 300000: QEMU creates the socket early in its start). */
  connectTimeoutMs?: number;
  /** Deadline of one QMP command (default 5000). */
  commandTimeoutMs?: number;
}

interface PendingCommand {
  resolve(value: unknown): void;
  reject(error: Error): void;
  timer: NodeJS.Timeout;
}

/**
 * A QMP command that did not succeed, and whether QEMU may still have carried it out: `refused`
 * (QEMU answered with an error: it did nothing) and `not-sent` (no connection) are certain;
 * `no-answer` (the deadline passed or the connection closed first) is not, so a caller that must
 * know what QEMU did asks again or assumes the command took effect.
 */
export class QmpCommandError extends Error {
  constructor(
    message: string,
    /** `refused`, `not-sent` or `no-answer`; see the class. */
    readonly outcome: "refused" | "not-sent" | "no-answer",
    /** QEMU's error class for `refused` (e.g. `GenericError`). */
    readonly qmpClass?: string,
  ) {
    super(message);
    this.name = "QmpCommandError";
  }
}

/**
 * A long-lived connection to QEMU's QMP socket that watches for the guest being paused on a disk
 * error (`BLOCK_IO_ERROR` with action `stop`, or `query-status` reporting `io-error`), and sends
 * the odd command (`cont`). QEMU's default drive policy (`werror=enospc`) pauses the guest when
 * the host file system under its disk is full; without this watch every guest operation would
 * just wait. The connection is retried until QEMU has created the socket; once QEMU exits it is
 * simply gone.
 */
export class QmpMonitor {
  private socket: net.Socket | undefined;
  private closed = false;
  private buffer = "";
  private nextId = 1;
  private readonly pending = new Map<string, PendingCommand>();
  private lastError: IoErrorPause | undefined;
  /** Resolves true once QMP is negotiated, false if it never could be (QEMU gone, monitor closed). */
  readonly connected: Promise<boolean>;

  constructor(
    readonly socketPath: string,
    private readonly options: QmpMonitorOptions,
  ) {
    this.connected = this.connectLoop();
  }

  /**
   * Runs a QMP command and resolves with its `return`; rejects with a {@link QmpCommandError}.
   * `timeoutMs` overrides the monitor's deadline for this command (one that drains the guest's
   * disk I/O can take longer than the usual 5 s).
   */
  command(execute: string, args?: Record<string, unknown>, options: { timeoutMs?: number } = {}): Promise<unknown> {
    const socket = this.socket;
    if (!socket || this.closed || socket.destroyed) {
      return Promise.reject(new QmpCommandError(`QMP is not connected (${execute})`, "not-sent"));
    }
    const id = `pisb-${this.nextId++}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => {
          this.pending.delete(id);
          reject(new QmpCommandError(`QMP ${execute} got no answer`, "no-answer"));
        },
        options.timeoutMs ?? this.options.commandTimeoutMs ?? 5000,
      );
      timer.unref?.();
      this.pending.set(id, { resolve, reject, timer });
      socket.write(JSON.stringify({ execute, id, ...(args ? { arguments: args } : {}) }) + "\r\n");
    });
  }

  /** QEMU's run state (`running`, `paused`, `io-error`, ...). */
  async status(): Promise<string> {
    const result = (await this.command("query-status")) as { status?: unknown };
    return String(result?.status);
  }

  /** Closes the connection (QEMU keeps running). Idempotent. */
  close(): void {
    this.closed = true;
    this.socket?.destroy();
    this.failPending(new QmpCommandError("QMP monitor closed", "no-answer"));
  }

  private async connectLoop(): Promise<boolean> {
    const deadline = Date.now() + (this.options.connectTimeoutMs ?? 300_000);
    while (!this.closed && Date.now() < deadline) {
      const socket = await this.tryConnect();
      if (socket) {
        if (this.closed) {
          socket.destroy();
          return false;
        }
        return this.negotiate(socket);
      }
      await new Promise((resolve) => setTimeout(resolve, 100).unref?.());
    }
    return false;
  }

  private tryConnect(): Promise<net.Socket | undefined> {
    return new Promise((resolve) => {
      const socket = net.createConnection(this.socketPath);
      socket.once("connect", () => {
        socket.removeAllListeners("error");
        resolve(socket);
      });
      socket.once("error", () => {
        socket.destroy();
        resolve(undefined);
      });
    });
  }

  private async negotiate(socket: net.Socket): Promise<boolean> {
    this.socket = socket;
    socket.setEncoding("utf8");
    socket.unref();
    socket.on("data", (chunk: string) => this.onData(chunk));
    socket.on("error", () => undefined);
    socket.on("close", () => this.failPending(new QmpCommandError("QMP connection closed", "no-answer")));
    try {
      // The greeting arrives first; capabilities must be accepted before any other command.
      await this.command("qmp_capabilities");
      // A pause that happened before we connected raised its event to nobody: ask.
      const status = await this.status();
      if (status === "io-error") this.reportPause(this.lastError);
      if (status === "internal-error") this.options.onInternalError?.();
      return true;
    } catch {
      return false;
    }
  }

  private onData(chunk: string): void {
    this.buffer += chunk;
    for (let newline = this.buffer.indexOf("\n"); newline !== -1; newline = this.buffer.indexOf("\n")) {
      const line = this.buffer.slice(0, newline).trim();
      this.buffer = this.buffer.slice(newline + 1);
      if (line === "") continue;
      let message: Record<string, unknown>;
      try {
        message = JSON.parse(line) as Record<string, unknown>;
      } catch {
        continue;
      }
      this.onMessage(message);
    }
  }

  private onMessage(message: Record<string, unknown>): void {
    if (typeof message.event === "string") {
      const data = (message.data ?? {}) as Record<string, unknown>;
      if (message.event === "BLOCK_IO_ERROR") {
        const pause: IoErrorPause = {
          nospace: typeof data.nospace === "boolean" ? data.nospace : undefined,
          reason: typeof data.reason === "string" ? data.reason : undefined,
          operation: typeof data.operation === "string" ? data.operation : undefined,
          device: typeof data.device === "string" && data.device !== "" ? data.device : undefined,
        };
        this.lastError = pause;
        if (data.action === "stop") this.reportPause(pause);
      } else if (message.event === "STOP" && this.options.onInternalError) {
        // QEMU stops the VM on a KVM internal error with no event of its own: ask why it stopped.
        this.status().then(
          (status) => {
            if (status === "internal-error" && !this.closed) this.options.onInternalError?.();
          },
          () => undefined,
        );
      }
      return;
    }
    const id = typeof message.id === "string" ? message.id : undefined;
    const entry = id === undefined ? undefined : this.pending.get(id);
    if (!entry) return;
    this.pending.delete(id!);
    clearTimeout(entry.timer);
    if (message.error !== undefined) {
      const error = message.error as { class?: unknown; desc?: unknown };
      entry.reject(
        new QmpCommandError(`QMP error ${String(error.class)}: ${String(error.desc)}`, "refused", String(error.class)),
      );
    } else entry.resolve(message.return);
  }

  private reportPause(pause: IoErrorPause | undefined): void {
    if (this.closed) return;
    this.options.onIoErrorPause(
      pause ?? { nospace: undefined, reason: undefined, operation: undefined, device: undefined },
    );
  }

  private failPending(error: Error): void {
    for (const [id, entry] of this.pending) {
      this.pending.delete(id);
      clearTimeout(entry.timer);
      entry.reject(error);
    }
  }
}
