// A booted VM: guest operations go to its GondolinGuest; `checkpoint()` publishes the disk while
// the guest runs (QEMU's layer switch is layer-switch.ts), `stop()` quiesces the guest and
// checkpoints the disk run, `suspend()` also saves its memory first, `close()` discards it.
import fsp from "node:fs/promises";
import path from "node:path";
import type { Duplex } from "node:stream";
import type { VM } from "@earendil-works/gondolin";
import type { CheckpointResult, DiskRun, KeepOptions, RunRecovery } from "../disk/disk-store.js";
import { keepCheckpoint } from "../disk/kept-checkpoints.js";
import { keepLiveMemoryCheckpoint, type LiveMemoryVm } from "../disk/live-memory.js";
import { VmError, isVmError, messageOf } from "../errors.js";
import { runInGuest } from "../guest/exec-util.js";
import type { GondolinGuest } from "../guest/gondolin-guest.js";
import { vfsInodesOf } from "../gondolin-private.js";
import type { GuestExecOptions, GuestExecution, GuestSshAccess, GuestSshOptions } from "../guest/guest-vm.js";
import { hostDiskFullError, hostSpaceOf } from "../host/host-disk.js";
import type { AcceleratorChoice } from "../host/host-facts.js";
import { ensureQemuGone } from "../host/qemu-process.js";
import type { TransferDisk } from "../guest/guest-vm.js";
import type { QmpMonitor } from "../host/qmp.js";
import { memoryTempName } from "../filenames.js";
import {
  removeSuspendState,
  saveMemory,
  writeSuspendState,
  type SavedMachine,
  type SuspendState,
} from "../disk/vm-memory.js";
import { switchRootLayer } from "./layer-switch.js";
import type {
  CloseOptions,
  LiveCheckpointResult,
  RestoreOutcome,
  RunningVm,
  StopResult,
  SuspendResult,
} from "./vm-types.js";

const DEFAULT_SYNC_TIMEOUT_MS = 120_000;
/** Bound of QEMU writing the guest's memory (a few GiB at disk speed). */
const SAVE_MEMORY_TIMEOUT_MS = 300_000;
// Flush everything, then freeze the root filesystem so nothing more reaches the disk before QEMU
// goes; fsfreeze is optional (sync alone leaves a consistent, if not clean, file system).
const QUIESCE_SCRIPT =
  "sync; if command -v fsfreeze >/dev/null 2>&1; then fsfreeze -f / 2>/dev/null || sync; fi; echo quiesced";
/** A stop resumes a guest paused on a full host disk only with at least this much free again. */
const RESUME_MIN_FREE_BYTES = 16 * 1024 * 1024;
/** Bound of a live checkpoint's guest `sync`. */
const LIVE_SYNC_TIMEOUT_MS = 60_000;

/** The Gondolin VM under a `RunningVm` from `startVm`; undefined for any other GuestVm. */
export function gondolinVmOf(vm: RunningVm): VM | undefined {
  return vm instanceof BootedVm ? vm.gondolinVm() : undefined;
}

export class BootedVm implements RunningVm {
  private stopping: Promise<StopResult> | undefined;
  private closing: Promise<void> | undefined;
  /** The live checkpoint under way, if any: a stop, suspend or close waits for it. */
  private live: Promise<LiveCheckpointResult> | undefined;

  constructor(
    readonly name: string,
    private readonly guest: GondolinGuest,
    private readonly monitor: QmpMonitor,
    private readonly run: DiskRun,
    private readonly runtimeDir: string,
    readonly accelerator: AcceleratorChoice,
    readonly warnings: readonly string[],
    readonly bootMs: number,
    private readonly grown: boolean,
    private readonly secrets?: {
      updateSecret(name: string, value: string, placeholder?: string): void;
      close?(): Promise<void>;
    },
    private readonly memory?: { machine: SavedMachine; restore: RestoreOutcome | undefined },
    private readonly recovered?: RunRecovery,
    /** The transfer disk QEMU serves to this guest (transfer-disk.ts), if the machine has one. */
    readonly transferDisk?: TransferDisk,
  ) {}

  get restore(): RestoreOutcome | undefined {
    return this.memory?.restore;
  }

  get recovery(): RunRecovery | undefined {
    return this.recovered;
  }

  updateSecret(name: string, value: string, placeholder?: string): void {
    if (!this.secrets) {
      throw new VmError("VM_SECRET_INVALID", `no secret named ${name} was given to this VM`, {
        details: { secret: name },
      });
    }
    this.secrets.updateSecret(name, value, placeholder);
  }

  /** The Gondolin VM underneath, for comparisons in `./testing` only. */
  gondolinVm(): VM {
    return this.guest.gondolin;
  }

  get diskDir(): string {
    return this.run.dir;
  }

  get hostPid(): number | undefined {
    return this.guest.hostPid;
  }

  get closed(): boolean {
    return this.guest.closed || this.stopping !== undefined || this.closing !== undefined;
  }

  get fault(): VmError | undefined {
    return this.guest.closed ? undefined : this.guest.fault.current;
  }

  exec(command: string | readonly string[], options?: GuestExecOptions): GuestExecution {
    return this.guest.exec(command, options);
  }

  readFile(file: string, options?: { signal?: AbortSignal }): Promise<Buffer> {
    return this.guest.readFile(file, options);
  }

  writeFile(file: string, data: string | Buffer, options?: { signal?: AbortSignal }): Promise<void> {
    return this.guest.writeFile(file, data, options);
  }

  connectTcp(port: number, options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<Duplex> {
    return this.guest.connectTcp(port, options);
  }

  enableSsh(options?: GuestSshOptions): Promise<GuestSshAccess> {
    return this.guest.enableSsh(options);
  }

  get diskWrittenAtMs(): number | undefined {
    return this.run.activeWrittenAtMs();
  }

  checkpoint(options: { syncTimeoutMs?: number; keep?: KeepOptions } = {}): Promise<LiveCheckpointResult> {
    if (this.closing || this.stopping || this.guest.closed) {
      return Promise.reject(
        new VmError("VM_CLOSED", `the VM ${this.name} is stopping or closed`, { details: { name: this.name } }),
      );
    }
    const timeoutMs = options.syncTimeoutMs ?? LIVE_SYNC_TIMEOUT_MS;
    if (options.keep) {
      // Its own checkpoint, after one under way: that one may be done before the caller's writes.
      const keep = options.keep;
      const prior = this.live?.catch(() => undefined);
      const kept = (async () => {
        await prior;
        if (keep.memory) return this.keepWithMemory(keep);
        const result = await this.checkpointOnce(timeoutMs);
        return { ...result, kept: await keepCheckpoint(this.run.dir, this.run.pointer, keep) };
      })();
      const tracked: Promise<LiveCheckpointResult> = kept.finally(() => {
        if (this.live === tracked) this.live = undefined;
      });
      this.live = tracked;
      return tracked;
    }
    this.live ??= this.checkpointOnce(timeoutMs).finally(() => {
      this.live = undefined;
    });
    return this.live;
  }

  /** A kept memory checkpoint of the running guest (disk/live-memory.ts): paused for the last pages only. */
  private async keepWithMemory(keep: KeepOptions): Promise<LiveCheckpointResult> {
    if (!this.memory) {
      throw new VmError("VM_UNSUPPORTED", `the VM ${this.name} was started without what a memory checkpoint records`, {
        details: { name: this.name },
      });
    }
    const started = performance.now();
    const vm: LiveMemoryVm = {
      monitor: this.monitor,
      runtimeDir: this.runtimeDir,
      run: this.run,
      grown: this.grown,
      switchLayer: (file) => switchRootLayer(this.monitor, file),
      recordOf: (generation, saved) => this.suspendState(generation, saved),
      vfs: () => vfsInodesOf(this.guest.gondolin),
    };
    const { disk, kept, pausedMs, memoryBytes } = await keepLiveMemoryCheckpoint(vm, keep, SAVE_MEMORY_TIMEOUT_MS);
    return { ...disk, syncMs: 0, totalMs: performance.now() - started, kept, pauseMs: pausedMs, memoryBytes };
  }

  private async checkpointOnce(syncTimeoutMs: number): Promise<LiveCheckpointResult> {
    const started = performance.now();
    // Paused on a full host disk: nothing can be flushed; the fault says what to do.
    const fault = this.guest.fault.current;
    if (fault) throw fault;
    // Outside the stall: the guest runs on while its page cache goes to the disk, so the layer
    // QEMU is about to leave holds everything written until now, not just what ext4 had committed.
    try {
      const result = await runInGuest(this.guest, ["/bin/sh", "-c", "sync && echo synced"], {
        signal: AbortSignal.timeout(syncTimeoutMs),
      });
      if (result.exitCode !== 0 || !result.stdout.includes("synced")) {
        throw new Error(`guest sync exited with ${result.exitCode}: ${result.stderr.trim()}`);
      }
    } catch (error) {
      if (isVmError(error, "VM_HOST_DISK_FULL")) throw error;
      throw new VmError(
        "VM_CHECKPOINT_FAILED",
        `the guest of ${this.name} did not confirm that its disk was synced, so no checkpoint was taken; the previous one is still current`,
        { cause: error, details: { name: this.name, reason: messageOf(error) } },
      );
    }
    const syncMs = performance.now() - started;
    const disk = await this.run.liveCheckpoint({
      grown: this.grown,
      switchLayer: (file) => switchRootLayer(this.monitor, file),
    });
    return { ...disk, syncMs, totalMs: performance.now() - started };
  }

  stop(options: { syncTimeoutMs?: number } = {}): Promise<StopResult> {
    if (this.closing) {
      return Promise.reject(
        new VmError("VM_CLOSED", `the VM ${this.name} was closed without a checkpoint`, {
          details: { name: this.name },
        }),
      );
    }
    this.stopping ??= this.afterLive(() => this.stopOnce(options.syncTimeoutMs ?? DEFAULT_SYNC_TIMEOUT_MS, false));
    return this.stopping;
  }

  /**
   * Runs `work` once a live checkpoint under way has ended: it changes the run's layers and
   * pointer, which a stop, suspend or close must not do at the same time.
   */
  private async afterLive<T>(work: () => Promise<T>): Promise<T> {
    await this.live?.catch(() => undefined);
    return work();
  }

  suspend(options: { syncTimeoutMs?: number } = {}): Promise<SuspendResult> {
    if (this.closing || this.stopping) {
      return Promise.reject(
        new VmError("VM_CLOSED", `the VM ${this.name} is already stopping or closed`, { details: { name: this.name } }),
      );
    }
    if (!this.memory) {
      return Promise.reject(
        new VmError("VM_UNSUPPORTED", `the VM ${this.name} was started without what a suspend records`, {
          details: { name: this.name },
        }),
      );
    }
    const suspending = this.afterLive(() => this.stopOnce(options.syncTimeoutMs ?? DEFAULT_SYNC_TIMEOUT_MS, true));
    this.stopping = suspending;
    return suspending as Promise<SuspendResult>;
  }

  private async stopOnce(syncTimeoutMs: number, keepMemory: boolean): Promise<StopResult | SuspendResult> {
    const started = performance.now();
    const pid = this.guest.hostPid;
    let syncError: unknown;
    if (this.guest.exitedByItself) {
      syncError = new Error("QEMU exited by itself before the stop");
    } else if (this.guest.fault.current && !(await this.resumeIfRoom())) {
      syncError = this.guest.fault.current;
    } else {
      try {
        const result = await runInGuest(this.guest, ["/bin/sh", "-c", QUIESCE_SCRIPT], {
          signal: AbortSignal.timeout(syncTimeoutMs),
        });
        if (result.exitCode !== 0 || !result.stdout.includes("quiesced")) {
          syncError = new Error(`guest sync exited with ${result.exitCode}: ${result.stderr.trim()}`);
        }
      } catch (error) {
        syncError = error;
      }
    }
    const syncMs = performance.now() - started;
    // The guest is synced and frozen: pause it and save its memory before QEMU goes.
    let saved: { temp: string; bytes: number; ms: number; vfs: SuspendState["vfs"] } | undefined;
    let memoryError: unknown;
    if (keepMemory && syncError === undefined) {
      const temp = path.join(this.diskDir, memoryTempName());
      try {
        const vfs = vfsInodesOf(this.guest.gondolin);
        saved = { temp, vfs, ...(await saveMemory(this.monitor, this.runtimeDir, temp, SAVE_MEMORY_TIMEOUT_MS)) };
      } catch (error) {
        memoryError = error;
      }
    }
    const closeStarted = performance.now();
    this.monitor.close();
    await this.guest.close().catch(() => undefined);
    await this.secrets?.close?.().catch(() => undefined);
    await ensureQemuGone(pid);
    const closeMs = performance.now() - closeStarted;
    await fsp.rm(this.runtimeDir, { recursive: true, force: true }).catch(() => undefined);
    if (syncError !== undefined) {
      await this.run.discard().catch(() => undefined);
      if (isVmError(syncError, "VM_HOST_DISK_FULL")) {
        throw hostDiskFullError({ dir: this.diskDir, situation: "stop", name: this.name, cause: syncError });
      }
      throw new VmError(
        "VM_CHECKPOINT_FAILED",
        `the guest of ${this.name} did not confirm that its disk was synced, so nothing since the start was saved; the previous checkpoint is still current`,
        { cause: syncError, details: { name: this.name, reason: messageOf(syncError) } },
      );
    }
    // The memory's record names the checkpoint about to be taken: should that never become
    // current (a crash, a failure), the record names a generation the disk never reaches.
    const generation = this.run.pointer.generation + 1;
    if (saved) {
      try {
        await writeSuspendState(this.diskDir, saved.temp, this.suspendState(generation, saved));
      } catch (error) {
        memoryError = error;
        saved = undefined;
        await removeSuspendState(this.diskDir).catch(() => undefined);
      }
    }
    let checkpoint: CheckpointResult;
    try {
      checkpoint = await this.run.checkpoint({ grown: this.grown });
    } catch (error) {
      if (saved) await removeSuspendState(this.diskDir).catch(() => undefined);
      if (isVmError(error, "VM_HOST_DISK_FULL")) {
        throw hostDiskFullError({ dir: this.diskDir, situation: "stop", name: this.name, cause: error });
      }
      throw error;
    }
    if (memoryError !== undefined) {
      throw new VmError(
        "VM_SUSPEND_FAILED",
        `the memory of ${this.name} could not be saved (${messageOf(memoryError)}); its disk was saved as by a stop, so the next start boots cold`,
        { cause: memoryError, details: { name: this.name, reason: messageOf(memoryError), diskSaved: true } },
      );
    }
    const result = { ...checkpoint, syncMs, closeMs, totalMs: performance.now() - started };
    return saved ? { ...result, memoryBytes: saved.bytes, memoryMs: saved.ms } : result;
  }

  private suspendState(generation: number, saved: { bytes: number; vfs: SuspendState["vfs"] }): SuspendState {
    return {
      version: 1,
      generation,
      bytes: saved.bytes,
      savedAt: new Date().toISOString(),
      machine: this.memory!.machine,
      ...(saved.vfs ? { vfs: saved.vfs } : {}),
    };
  }

  /**
   * For a guest paused on a full host disk: if space was freed since, lets QEMU retry the failed
   * writes and run on (a new pause raises the fault again). Resolves whether the guest runs.
   */
  private async resumeIfRoom(): Promise<boolean> {
    const space = hostSpaceOf(this.diskDir);
    if (!space || space.freeBytes < RESUME_MIN_FREE_BYTES) return false;
    const fault = this.guest.fault.current;
    this.guest.fault.clear();
    try {
      await this.monitor.command("cont");
      return true;
    } catch {
      if (fault) this.guest.fault.raise(fault);
      return false;
    }
  }

  close(options: CloseOptions = {}): Promise<void> {
    if (this.stopping)
      return this.stopping.then(
        () => undefined,
        () => undefined,
      );
    this.closing ??= this.afterLive(async () => {
      this.monitor.close();
      const pid = this.guest.hostPid;
      await this.guest.close().catch(() => undefined);
      await this.secrets?.close?.().catch(() => undefined);
      await ensureQemuGone(pid);
      await fsp.rm(this.runtimeDir, { recursive: true, force: true }).catch(() => undefined);
      await (options.keepRun ? this.run.release() : this.run.discard());
    });
    return this.closing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
