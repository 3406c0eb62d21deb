// The host-process fake of GuestVm for tests: the "guest" is a directory and host processes.
import { spawn, type ChildProcess } from "node:child_process";
import fsp from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import type { Duplex } from "node:stream";
import { VmError, messageOf } from "./errors.js";
import { failedExecution, signalName } from "./guest/exec-util.js";
import type { GuestExecOptions, GuestExecution, GuestExitStatus, GuestSshAccess, GuestVm } from "./guest/guest-vm.js";

export { runInGuest } from "./guest/exec-util.js";
export { bootTestVm, type TestVm } from "./testing/test-vm.js";
export { openGondolinIngress, type BareIngress } from "./testing/bare-ingress.js";
export { selfSignedCert } from "./testing/test-cert.js";

/** Options of {@link createLocalGuestVm}. */
export interface LocalGuestVmOptions {
  /** Host directory standing in for the guest's `/` (default: a new temp dir, removed on close). */
  root?: string;
  /** Name for messages (default "local"). */
  name?: string;
  /** Base environment of every command (default: this process's environment). */
  env?: Record<string, string | undefined>;
  /** Maps a guest port to the host port `connectTcp` dials (default: the same number). */
  portMap?: (guestPort: number) => number;
}

/** The local fake: a {@link GuestVm} whose "guest" is host processes and a host directory. */
export interface LocalGuestVm extends GuestVm {
  /** Host directory standing in for the guest's `/`. */
  readonly root: string;
  /** Host path for a guest absolute path. */
  hostPath(guestPath: string): string;
  /** Commands still running. */
  readonly running: number;
  /**
   * Cuts every connection `connectTcp` made that is still open, as a guest whose network helper
   * restarts would; returns how many.
   */
  dropConnections(): number;
  /** Same as `close()`. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * A faithful fake of a booted guest for unit tests of upper layers: commands are real host
 * processes (`/bin/sh -lc` for strings, each in its own process group; abort and close kill the
 * group), guest absolute paths for `readFile`/`writeFile`/`cwd` map under `root`, `connectTcp`
 * dials `127.0.0.1` on the host, and `enableSsh` is unsupported (VM_UNSUPPORTED).
 */
export async function createLocalGuestVm(options: LocalGuestVmOptions = {}): Promise<LocalGuestVm> {
  const ownsRoot = options.root === undefined;
  const root = options.root ?? (await fsp.mkdtemp(path.join(os.tmpdir(), "pisb-local-guest-")));
  await fsp.mkdir(root, { recursive: true });
  return new LocalGuest(options.name ?? "local", await fsp.realpath(root), ownsRoot, options);
}

class LocalGuest implements LocalGuestVm {
  private readonly children = new Set<ChildProcess>();
  private readonly connections = new Set<net.Socket>();
  private closing: Promise<void> | undefined;

  constructor(
    readonly name: string,
    readonly root: string,
    private readonly ownsRoot: boolean,
    private readonly options: LocalGuestVmOptions,
  ) {}

  get hostPid(): number | undefined {
    return undefined;
  }

  get closed(): boolean {
    return this.closing !== undefined;
  }

  get running(): number {
    return this.children.size;
  }

  hostPath(guestPath: string): string {
    if (!path.posix.isAbsolute(guestPath)) {
      throw new VmError("VM_FILE_FAILED", `guest path ${guestPath} must be absolute`, { details: { path: guestPath } });
    }
    return path.join(this.root, path.posix.normalize(guestPath));
  }

  exec(command: string | readonly string[], options: GuestExecOptions = {}): GuestExecution {
    const { signal } = options;
    if (this.closed) return failedExecution(this.closedError());
    if (signal?.aborted) return failedExecution(signal.reason);
    const argv = typeof command === "string" ? ["/bin/sh", "-lc", command] : [...command];
    if (argv.length === 0) return failedExecution(new VmError("VM_EXEC_FAILED", "the command is empty"));
    const child = spawn(argv[0]!, argv.slice(1), {
      cwd: options.cwd !== undefined ? this.hostPath(options.cwd) : this.root,
      env: { ...(this.options.env ?? process.env), ...(options.env ?? {}) },
      stdio: [options.stdin === undefined || options.stdin === false ? "ignore" : "pipe", "pipe", "pipe"],
      detached: true,
    });
    this.children.add(child);
    if (typeof options.stdin === "string" || Buffer.isBuffer(options.stdin)) {
      child.stdin?.on("error", () => undefined);
      child.stdin?.end(options.stdin);
    }
    const exited = new Promise<GuestExitStatus>((resolve, reject) => {
      child.once("error", (error) => {
        this.children.delete(child);
        reject(
          new VmError("VM_EXEC_FAILED", `the command ${argv[0]} could not be started: ${messageOf(error)}`, {
            cause: error,
            details: { command: argv[0] },
          }),
        );
      });
      child.once("close", (code, killedBy) => {
        this.children.delete(child);
        const number = killedBy ? os.constants.signals[killedBy] : undefined;
        resolve({
          exitCode: code ?? 128 + (number ?? 0),
          ...(killedBy ? { signal: signalName(number) ?? killedBy } : {}),
        });
      });
    });
    let result = exited;
    if (signal) {
      let onAbort: (() => void) | undefined;
      const aborted = new Promise<never>((_, reject) => {
        onAbort = () => {
          killGroup(child, "SIGKILL");
          reject(signal.reason);
        };
        signal.addEventListener("abort", onAbort, { once: true });
      });
      result = Promise.race([exited, aborted]).finally(() => signal.removeEventListener("abort", onAbort!));
    }
    result.catch(() => undefined);
    return {
      stdin: options.stdin === true ? child.stdin : null,
      stdout: child.stdout!,
      stderr: child.stderr!,
      result,
    };
  }

  async readFile(guestPath: string, options: { signal?: AbortSignal } = {}): Promise<Buffer> {
    options.signal?.throwIfAborted();
    if (this.closed) throw this.closedError();
    try {
      return await fsp.readFile(this.hostPath(guestPath), options.signal ? { signal: options.signal } : {});
    } catch (error) {
      throw this.fileError(error, guestPath, "reading", options.signal);
    }
  }

  async writeFile(guestPath: string, data: string | Buffer, options: { signal?: AbortSignal } = {}): Promise<void> {
    options.signal?.throwIfAborted();
    if (this.closed) throw this.closedError();
    try {
      await fsp.writeFile(this.hostPath(guestPath), data, options.signal ? { signal: options.signal } : {});
    } catch (error) {
      throw this.fileError(error, guestPath, "writing", options.signal);
    }
  }

  connectTcp(port: number, options: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<Duplex> {
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.closed) return Promise.reject(this.closedError());
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      return Promise.reject(
        new VmError("VM_TCP_CONNECT_FAILED", `guest port ${port} is not a valid TCP port (1-65535)`, {
          details: { port },
        }),
      );
    }
    const hostPort = this.options.portMap ? this.options.portMap(port) : port;
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host: "127.0.0.1", port: hostPort });
      const timer = setTimeout(
        () => fail(new Error(`no answer within ${options.timeoutMs ?? 5000} ms`)),
        options.timeoutMs ?? 5000,
      );
      const onAbort = () => {
        finish();
        socket.destroy();
        reject(signal!.reason);
      };
      const finish = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        socket.off("error", fail);
      };
      function fail(error: Error) {
        finish();
        socket.destroy();
        reject(
          new VmError(
            "VM_TCP_CONNECT_FAILED",
            `nothing accepted a connection on guest port ${port} (${error.message})`,
            {
              cause: error,
              details: { port, reason: error.message },
            },
          ),
        );
      }
      signal?.addEventListener("abort", onAbort, { once: true });
      socket.once("error", fail);
      socket.once("connect", () => {
        finish();
        this.connections.add(socket);
        socket.once("close", () => this.connections.delete(socket));
        resolve(socket);
      });
    });
  }

  dropConnections(): number {
    const open = [...this.connections];
    for (const socket of open) socket.destroy();
    return open.length;
  }

  async enableSsh(): Promise<GuestSshAccess> {
    throw new VmError("VM_UNSUPPORTED", "the local fake guest has no SSH", {
      hint: "use a real VM for terminal tests",
    });
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      const children = [...this.children];
      for (const child of children) killGroup(child, "SIGTERM");
      const deadline = Date.now() + 2000;
      while (this.children.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      for (const child of this.children) killGroup(child, "SIGKILL");
      if (this.ownsRoot) await fsp.rm(this.root, { recursive: true, force: true });
    })();
    return this.closing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  private closedError(): VmError {
    return new VmError("VM_CLOSED", `the VM ${this.name} is closed`, {
      hint: "start it again",
      details: { name: this.name },
    });
  }

  private fileError(error: unknown, guestPath: string, action: string, signal?: AbortSignal): unknown {
    if (signal?.aborted) return signal.reason;
    if (error instanceof VmError) return error;
    if ((error as NodeJS.ErrnoException).code === "ENOENT") {
      return new VmError("VM_FILE_NOT_FOUND", `${guestPath} does not exist in the guest`, {
        cause: error,
        details: { path: guestPath },
      });
    }
    return new VmError("VM_FILE_FAILED", `${action} ${guestPath} in the guest failed: ${messageOf(error)}`, {
      cause: error,
      details: { path: guestPath, reason: messageOf(error) },
    });
  }
}

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  // The whole group: the leader may be gone while its children still hold the output pipes.
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // the group is empty
  }
}
