// A booted Gondolin VM behind the GuestVm interface: exec, files, TCP and SSH.
import { randomBytes } from "node:crypto";
import { Writable, type Duplex } from "node:stream";
import type { VM } from "@earendil-works/gondolin";
import { VmError, messageOf } from "../errors.js";
import { failedExecution, signalName } from "./exec-util.js";
import { GuestTcpStream } from "./guest-tcp-stream.js";
import { GuestFault } from "./guest-fault.js";
import { ingressClosedByGuest, ingressQueuedBytes, ingressServerOf, onQemuExit } from "../gondolin-private.js";
import type { GuestExecOptions, GuestExecution, GuestSshAccess, GuestSshOptions, GuestVm } from "./guest-vm.js";
import { LOOPBACK_QUICKACK_ARGV } from "./loopback-quickack.js";
import { GuestSsh } from "./guest-ssh.js";

/** Environment variable that tags every process of a cancellable exec (and its descendants). */
export const EXEC_TOKEN_ENV = "PI_SANDBOX_EXEC_TOKEN";

/** How long a stream cut by Gondolin waits to see QEMU's exit before it ends with the channel's failure. */
const STREAM_EXIT_WAIT_MS = 2_000;

// Kills every guest process whose environment carries the token: the command and whatever it
// spawned, even children that started their own session. Gondolin's protocol has no "kill exec"
// message, so this is how an AbortSignal reaches the guest.
const KILL_BY_TOKEN_SCRIPT = [
  `t="${EXEC_TOKEN_ENV}=$1"`,
  // One grep over every environ file (a fork per process costs ~50 ms under TCG); a second pass
  // catches children forked while the first one ran.
  `for pass in 1 2; do`,
  `  for f in $(grep -lsxzF "$t" /proc/[0-9]*/environ 2>/dev/null); do`,
  `    p="\${f#/proc/}"; p="\${p%/environ}"`,
  `    [ "$p" != "$$" ] && kill -KILL "$p" 2>/dev/null`,
  `  done`,
  `done`,
  `exit 0`,
].join("\n");

/** Maps a Gondolin file-operation error. */
function mapFileError(error: unknown, path: string, action: string, signal?: AbortSignal): unknown {
  if (signal?.aborted) return signal.reason;
  if (error instanceof VmError) return error;
  const message = messageOf(error);
  if (/ENOENT|no such file|FileNotFound/i.test(message)) {
    return new VmError("VM_FILE_NOT_FOUND", `${path} does not exist in the guest`, { cause: error, details: { path } });
  }
  return new VmError("VM_FILE_FAILED", `${action} ${path} in the guest failed: ${message}`, {
    cause: error,
    details: { path, reason: message },
  });
}

/**
 * {@link GuestVm} over a started Gondolin VM. Owns nothing on disk: `boot.ts` wraps it with the
 * disk run and the stop/checkpoint logic.
 */
export class GondolinGuest implements GuestVm {
  private closing: Promise<void> | undefined;
  private exited = false;
  private fileQueue: Promise<unknown> = Promise.resolve();
  private readonly pendingKills = new Set<Promise<unknown>>();
  /** Open `connectTcp` streams, ended with the VM. */
  private readonly streams = new Set<GuestTcpStream>();
  /** Resolved when QEMU exits. */
  private readonly exit = Promise.withResolvers<void>();
  private loopbackTuning: Promise<void> | undefined;
  private readonly ssh: GuestSsh;

  constructor(
    readonly name: string,
    private readonly vm: VM,
    /** Raised when the guest can no longer answer (paused on a full host disk): fails operations at once. */
    readonly fault: GuestFault = new GuestFault(),
  ) {
    onQemuExit(vm, () => {
      this.exited = true;
      this.exit.resolve();
      // Gondolin leaves its ingress streams open when QEMU dies: a reader would wait forever.
      for (const stream of this.streams) stream.destroy(this.closedError());
    });
    this.ssh = new GuestSsh(vm, this, {
      fault,
      closed: () => this.closed,
      closedError: () => this.closedError(),
    });
  }

  /** The wrapped Gondolin VM (for this package only). */
  get gondolin(): VM {
    return this.vm;
  }

  get hostPid(): number | undefined {
    return this.vm.getHostPid() ?? undefined;
  }

  get closed(): boolean {
    return this.closing !== undefined || this.exited;
  }

  /** Whether QEMU exited without being asked to. */
  get exitedByItself(): boolean {
    return this.exited && this.closing === undefined;
  }

  exec(command: string | readonly string[], options: GuestExecOptions = {}): GuestExecution {
    const { signal } = options;
    if (this.closed) return failedExecution(this.closedError());
    if (this.fault.current) return failedExecution(this.fault.current);
    if (signal?.aborted) return failedExecution(signal.reason);
    const argv = typeof command === "string" ? ["/bin/sh", "-lc", command] : [...command];
    if (argv.length === 0) return failedExecution(new VmError("VM_EXEC_FAILED", "the command is empty"));
    const token = signal ? randomBytes(8).toString("hex") : undefined;
    const env = { ...(options.env ?? {}), ...(token ? { [EXEC_TOKEN_ENV]: token } : {}) };
    const proc = this.vm.exec(argv, {
      env,
      ...(options.cwd !== undefined ? { cwd: options.cwd } : {}),
      stdin: options.stdin ?? false,
      stdout: "pipe",
      stderr: "pipe",
    });
    const stdout = proc.stdout;
    const stderr = proc.stderr;
    if (!stdout || !stderr) return failedExecution(new VmError("VM_EXEC_FAILED", "Gondolin returned no output pipes"));
    const stdin =
      options.stdin === true
        ? new Writable({
            write(chunk: Buffer, _encoding, callback) {
              try {
                proc.write(chunk);
                callback();
              } catch (error) {
                callback(error as Error);
              }
            },
            final(callback) {
              try {
                proc.end();
                callback();
              } catch (error) {
                callback(error as Error);
              }
            },
          })
        : null;
    const settled = this.fault.race(
      proc.result.then(
        (result) => ({
          exitCode: result.exitCode,
          ...(signalName(result.signal) ? { signal: signalName(result.signal)! } : {}),
        }),
        (error: unknown) => {
          throw this.mapExecError(error);
        },
      ),
    );
    let result = settled;
    if (signal && token) {
      let abortRequested = false;
      let onAbort: (() => void) | undefined;
      const killed = new Promise<never>((_, reject) => {
        // Settle only once the guest processes are gone, so callers may rely on it.
        onAbort = () => {
          abortRequested = true;
          void this.killByToken(token).then(() => reject(signal.reason));
        };
        signal.addEventListener("abort", onAbort, { once: true });
      });
      killed.catch(() => undefined);
      // An exit caused by our kill (or any exit after the abort) still reports the abort.
      const guarded = settled.then(
        (status) => (abortRequested ? killed : status),
        (error: unknown) => (abortRequested ? killed : Promise.reject(error)),
      );
      result = Promise.race([guarded, killed]).finally(() => signal.removeEventListener("abort", onAbort!));
    }
    // Callers may only read the streams; an unobserved rejection must not crash the process.
    result.catch(() => undefined);
    return { stdin, stdout, stderr, result };
  }

  /** Kills the guest processes of a cancelled exec; resolves when done (at most ~10 s). */
  private killByToken(token: string): Promise<unknown> {
    if (this.closed || this.fault.current) return Promise.resolve();
    const killing = this.vm.exec(["/bin/sh", "-c", KILL_BY_TOKEN_SCRIPT, "sh", token]).result;
    const kill = Promise.race([killing, new Promise((resolve) => setTimeout(resolve, 10_000).unref())])
      .catch(() => undefined)
      .finally(() => this.pendingKills.delete(kill));
    this.pendingKills.add(kill);
    return kill;
  }

  readFile(path: string, options: { signal?: AbortSignal } = {}): Promise<Buffer> {
    return this.serialised(async () => {
      if (this.closed) throw this.closedError();
      options.signal?.throwIfAborted();
      try {
        return await this.fault.race(this.vm.fs.readFile(path, options.signal ? { signal: options.signal } : {}));
      } catch (error) {
        throw mapFileError(error, path, "reading", options.signal);
      }
    });
  }

  writeFile(path: string, data: string | Buffer, options: { signal?: AbortSignal } = {}): Promise<void> {
    return this.serialised(async () => {
      if (this.closed) throw this.closedError();
      options.signal?.throwIfAborted();
      try {
        await this.fault.race(this.vm.fs.writeFile(path, data, options.signal ? { signal: options.signal } : {}));
      } catch (error) {
        throw mapFileError(error, path, "writing", options.signal);
      }
    });
  }

  /** Gondolin can hang on concurrent file writes (upstream #137): run file operations one at a time. */
  private serialised<T>(task: () => Promise<T>): Promise<T> {
    const run = this.fileQueue.then(task, task);
    this.fileQueue = run.catch(() => undefined);
    return run;
  }

  async connectTcp(port: number, options: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<Duplex> {
    const { signal } = options;
    signal?.throwIfAborted();
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new VmError("VM_TCP_CONNECT_FAILED", `guest port ${port} is not a valid TCP port (1-65535)`, {
        details: { port },
      });
    }
    if (this.closed) throw this.closedError();
    if (this.fault.current) throw this.fault.current;
    const server = ingressServerOf(this.vm);
    this.tuneLoopback();
    const timeoutMs = options.timeoutMs ?? 5000;
    const attempt = server.openIngressStream({ host: "127.0.0.1", port, timeoutMs });
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<never>((_, reject) => {
      if (!signal) return;
      onAbort = () => reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
    });
    try {
      const source = await Promise.race([attempt, aborted]);
      const stream = new GuestTcpStream(source, {
        queuedBytes: () => ingressQueuedBytes(server),
        tornDown: () => (ingressClosedByGuest(source) ? undefined : this.streamTornDown(port, source.errored)),
      });
      if (this.exited) stream.destroy(this.closedError());
      this.streams.add(stream);
      // A paused guest (the host disk is full) answers no stream either: they end with the fault.
      const offFault = this.fault.onRaise((fault) => stream.destroy(fault));
      stream.once("close", () => {
        this.streams.delete(stream);
        offFault();
      });
      return stream;
    } catch (error) {
      // A stream that arrives after we gave up must not leak.
      attempt.then((stream) => stream.destroy()).catch(() => undefined);
      if (signal?.aborted) throw signal.reason;
      if (this.closed) throw this.closedError();
      throw new VmError(
        "VM_TCP_CONNECT_FAILED",
        `nothing accepted a connection on guest port ${port} (${messageOf(error)})`,
        {
          hint: `is the service listening on 127.0.0.1:${port} in the guest?`,
          cause: error,
          details: { port, reason: messageOf(error) },
        },
      );
    } finally {
      if (onAbort) signal?.removeEventListener("abort", onAbort);
    }
  }

  /**
   * Once per boot, in the background: immediate ACKs on the guest's loopback route, so streams
   * kept alive across requests do not wait 40 ms per response on Nagle + delayed ACK (see
   * `loopback-quickack.ts`). Best effort: without it connections work, only slower when reused.
   */
  private tuneLoopback(): void {
    if (this.loopbackTuning || this.closed || this.fault.current) return;
    this.loopbackTuning = this.vm.exec([...LOOPBACK_QUICKACK_ARGV]).result.then(
      () => undefined,
      () => undefined,
    );
  }

  /**
   * SSH for a user on the host (guest-ssh.ts): Gondolin sets up the guest, our forwarder serves
   * it. Every call gets a new key and forwarder.
   */
  enableSsh(options: GuestSshOptions = {}): Promise<GuestSshAccess> {
    return this.ssh.enable(options);
  }

  /** Closes the SSH forwarders and the Gondolin VM (QEMU gets SIGTERM, then SIGKILL after 3 s). Idempotent. */
  close(): Promise<void> {
    if (!this.closing) {
      this.closing = (async () => {
        await this.ssh.closeAll();
        await Promise.allSettled([...this.pendingKills]);
        await this.vm.close();
      })();
    }
    return this.closing;
  }

  /**
   * The error of a stream Gondolin destroyed without the guest closing it. Its channel to the guest
   * fails as QEMU dies, a moment before QEMU's exit is seen: VM_CLOSED once that shows (or the VM
   * is being closed), else the channel's failure.
   */
  private async streamTornDown(port: number, reason: Error | null): Promise<VmError> {
    if (!this.closed) {
      await Promise.race([
        this.exit.promise,
        new Promise((resolve) => setTimeout(resolve, STREAM_EXIT_WAIT_MS).unref()),
      ]);
    }
    if (this.closed) return this.closedError();
    return new VmError("VM_TCP_STREAM_LOST", `the connection to guest port ${port} was cut by the VM's channel`, {
      hint: "connect again; if it keeps happening, see the VM's log",
      details: { port, reason: reason?.message ?? "closed without the guest closing it" },
    });
  }

  private closedError(): VmError {
    return new VmError(
      "VM_CLOSED",
      this.exitedByItself ? `the VM ${this.name} exited unexpectedly` : `the VM ${this.name} is closed`,
      { hint: "start it again", details: { name: this.name } },
    );
  }

  private mapExecError(error: unknown): unknown {
    if (error instanceof VmError) return error;
    if (
      this.closed ||
      /sandbox (connection|exited|is not running|stopped)|connection (closed|is not available)/i.test(messageOf(error))
    ) {
      return new VmError("VM_CLOSED", `the VM ${this.name} closed while a command ran`, {
        cause: error,
        details: { name: this.name, reason: messageOf(error) },
      });
    }
    return new VmError("VM_EXEC_FAILED", `the guest could not run the command: ${messageOf(error)}`, {
      cause: error,
      details: { reason: messageOf(error) },
    });
  }
}
