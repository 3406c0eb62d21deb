// The GuestVm interface: what the layers above may do with a guest (exec, files, TCP, SSH).
import type { Duplex, Readable, Writable } from "node:stream";

/** A VM's transfer disk as the host sees it (made by host/transfer-disk.ts). */
export interface TransferDisk {
  /** The raw file QEMU serves as the drive (0600, in the VM's run directory). */
  readonly path: string;
  /** Its size in bytes; the guest sees the same. */
  readonly sizeBytes: number;
  /** The drive's serial in the guest. */
  readonly serial: string;
}

/** Options for one command run in the guest. */
export interface GuestExecOptions {
  /** Absolute guest working directory; default the guest's `/`. */
  cwd?: string;
  /** Extra environment, merged over the guest's init environment. */
  env?: Record<string, string>;
  /** `true` opens `stdin` for writing; a string/Buffer is written and closed. Default: no stdin. */
  stdin?: boolean | string | Buffer;
  /**
   * Aborting kills the guest process and its descendants, then rejects `result` with
   * `signal.reason` (so once it rejects, they are gone).
   */
  signal?: AbortSignal;
}

/** How a guest command ended. */
export interface GuestExitStatus {
  /** Exit code; 128+n when killed by signal n. */
  exitCode: number;
  /** Signal name when the process was killed by one. */
  signal?: string;
}

/** A running guest command with streaming I/O. */
export interface GuestExecution {
  /** Writable stdin when `stdin: true` was requested, else `null`. */
  readonly stdin: Writable | null;
  /** Guest stdout as it arrives. Consume it, or it back-pressures the guest. */
  readonly stdout: Readable;
  /** Guest stderr as it arrives. */
  readonly stderr: Readable;
  /** Settles when the command exits; a non-zero exit resolves, it does not reject. */
  readonly result: Promise<GuestExitStatus>;
}

/** Collected output of a finished command (see `runInGuest`). */
export interface GuestRunResult extends GuestExitStatus {
  stdout: string;
  stderr: string;
}

/** Options of `GuestVm.enableSsh`. */
export interface GuestSshOptions {
  /** Guest user; default `root`. */
  user?: string;
  /** Rejects with `signal.reason`; nothing is left listening. */
  signal?: AbortSignal;
  /** The forwarder and its key files go after this long with no session open. Default 600000 (10 min). */
  idleTimeoutMs?: number;
}

/** A temporary SSH endpoint into the guest. */
export interface GuestSshAccess {
  /**
   * Ready-to-run `ssh …` command for a terminal on the host. It reads no ssh config file
   * (`-F none`), names a known_hosts file that pins the guest's host key
   * (`StrictHostKeyChecking=yes`) and a key that only this access has.
   */
  readonly command: string;
  /** Host port of the forwarder on 127.0.0.1. */
  readonly port: number;
  /** Guest user the key is authorised for. */
  readonly user: string;
  /** Idle time (no session open) after which the forwarder closes itself, in ms. */
  readonly idleTimeoutMs: number;
  /** Terminal sessions (client connections) open through it now. */
  readonly sessionCount: number;
  /** Whether it has closed (or is closing): by `close()`, its idle timeout, or the VM's end. */
  readonly closed: boolean;
  /** Stops the forwarder, cuts its sessions, removes the key files and the key from the guest. */
  close(): Promise<void>;
}

/**
 * The narrow view of a booted guest that layers above `vm` use. Implemented over Gondolin by
 * `startVm`, and by the fake `createLocalGuestVm` in `@pi-sandbox/vm/testing`.
 */
export interface GuestVm {
  /** Identity for logs, e.g. the instance name. */
  readonly name: string;
  /** Runs `command` (a string goes through `/bin/sh -lc`; an array runs directly, absolute path first). */
  exec(command: string | readonly string[], options?: GuestExecOptions): GuestExecution;
  /**
   * Reads a guest file. Gondolin serialises file operations behind every in-flight exec: do not
   * call this while a long-lived exec (such as the supervisor's channel) is open.
   */
  readFile(path: string, options?: { signal?: AbortSignal }): Promise<Buffer>;
  /** Writes a guest file (parent must exist). Same exec-idle caveat as `readFile`. */
  writeFile(path: string, data: string | Buffer, options?: { signal?: AbortSignal }): Promise<void>;
  /** Opens a raw TCP stream to `127.0.0.1:port` inside the guest (no guest network stack involved). */
  connectTcp(port: number, options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<Duplex>;
  /**
   * Starts sshd in the guest and a host forwarder; returns the command a user runs. Every call
   * makes a new key and forwarder; earlier accesses keep working until they close.
   */
  enableSsh(options?: GuestSshOptions): Promise<GuestSshAccess>;
  /** PID of the host QEMU process, when one runs. */
  readonly hostPid: number | undefined;
  /**
   * The raw file QEMU gives this guest as its transfer disk (a second virtio-blk drive, found in
   * the guest by its serial), for large copies; absent when the boot made none.
   */
  readonly transferDisk?: TransferDisk;
  /** Whether `close()` has begun or the VM exited by itself. */
  readonly closed: boolean;
  /**
   * Closes the VM. Syncs nothing and, on a `RunningVm` of `startVm`, keeps nothing written since
   * the start: only `RunningVm.stop()` checkpoints. Idempotent.
   */
  close(): Promise<void>;
}
