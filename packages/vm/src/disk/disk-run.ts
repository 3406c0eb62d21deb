// One run of a disk: the layers QEMU writes, the live checkpoints that publish them while it runs,
// and the checkpoint at its stop that makes the rest current (then compacts the chain).
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { VmError, messageOf } from "../errors.js";
import { fsyncDir, fsyncFile } from "../fs-util.js";
import { hostDiskFullError, isNoSpaceError } from "../host/host-disk.js";
import { type DiskLock } from "./disk-lock.js";
import { compact } from "./disk-compact.js";
import { newLayerName } from "../filenames.js";
import { type RecordedImage } from "../image/image.js";
import { QemuImg } from "./qemu-img.js";
import { removeQemuPidRecord } from "../host/qemu-process.js";
import {
  LayerSwitchRefused,
  readPointer,
  removeRunRecord,
  writePointer,
  writeRunRecord,
  type DiskPointer,
  type CheckpointResult,
  type DiskRun,
  type LayerSwitch,
  type LiveDiskCheckpoint,
  type RunRecord,
  type RunRecovery,
} from "./disk-layout.js";

export { compact } from "./disk-compact.js";

/**
 * Most layers one run may add to its chain through live checkpoints before its stop merges them.
 * QEMU reads an unwritten cluster by walking down the chain, and keeps each layer open: a chain
 * that grew without bound (a guest writing for days) would slow reads and hold a file per
 * checkpoint. With `checkpoint.every: 5m` this is over 5 hours of writing in one run.
 */
export const LIVE_CHECKPOINT_LAYERS_MAX = 64;

/** What tells whether a layer was written: QEMU's writes change its size, blocks or times. */
function writeMark(file: string): string | undefined {
  try {
    const s = fs.statSync(file);
    return `${s.size}:${s.blocks}:${s.mtimeMs}:${s.ctimeMs}`;
  } catch {
    return undefined;
  }
}

/** One run of a disk: the layers QEMU writes, published by checkpoints or dropped by discard(). */
export class OpenRun implements DiskRun {
  private finished = false;
  /** True while a live checkpoint is under way: the run's state is changing. */
  private checkpointing = false;
  readonly layerPath: string;
  readonly image: RecordedImage;
  /** The pointer's layer count when the run opened: a stop merges the run's layers down to it. */
  readonly baseLength: number;
  private current: DiskPointer;
  /** Layers of this run the pointer does not name yet, bottom to top; QEMU writes the last. */
  private unpublished: string[];
  /** The active layer's {@link writeMark} before QEMU could write it: unchanged means nothing written. */
  private activeMark: string | undefined;

  constructor(
    private readonly qemuImg: QemuImg,
    readonly dir: string,
    pointer: DiskPointer,
    layer: string,
    private readonly lock: DiskLock,
    readonly reapedPid: number | undefined,
    private readonly openedAt: string,
    readonly recovery?: RunRecovery,
  ) {
    this.layerPath = path.join(dir, layer);
    this.image = pointer.image;
    this.current = pointer;
    this.baseLength = pointer.layers.length;
    this.unpublished = [layer];
    // Taken before QEMU starts (openRun constructs the run first): the boot's writes count.
    this.activeMark = writeMark(this.layerPath);
  }

  get pointer(): DiskPointer {
    return this.current;
  }

  get activeLayerPath(): string {
    return path.join(this.dir, this.unpublished.at(-1)!);
  }

  activeWrittenAtMs(): number | undefined {
    try {
      return fs.statSync(this.activeLayerPath).mtimeMs;
    } catch {
      return undefined;
    }
  }

  /** The run record for `layers` (this run's unpublished layers, bottom to top). */
  private record(layers: readonly string[]): RunRecord {
    return {
      version: 1,
      layer: layers[0]!,
      generation: this.current.generation,
      openedAt: this.openedAt,
      ...(layers.length > 1 ? { next: layers.slice(1) } : {}),
      baseLength: this.baseLength,
    };
  }

  async liveCheckpoint(options: {
    grown: boolean;
    switchLayer: LayerSwitch;
    signal?: AbortSignal;
    /** Switch even when QEMU wrote nothing since the last one (the caller needs the disk as of the switch). */
    force?: boolean;
  }): Promise<LiveDiskCheckpoint> {
    this.assertOpen();
    if (this.checkpointing) {
      throw new VmError("VM_CHECKPOINT_FAILED", `a checkpoint of ${this.dir} is already under way`, {
        details: { dir: this.dir },
      });
    }
    this.checkpointing = true;
    try {
      let stallMs = 0;
      const changed = options.force === true || writeMark(this.activeLayerPath) !== this.activeMark;
      if (changed) stallMs = await this.switchToNewLayer(options.switchLayer, options.signal);
      return { ...(await this.publishInactive(options.grown)), stallMs };
    } finally {
      this.checkpointing = false;
    }
  }

  /**
   * Creates the next layer over the active one and has QEMU write into it. Every step is recorded
   * before it happens, so a crash at any point leaves a run record the next open recovers:
   * 1. the record names the new layer as `next` (written atomically, directory fsynced) before
   *    the file exists: a crash leaves at most an unused name or an empty layer over the active one;
   * 2. the layer is created and fsynced (header, directory) before QEMU may write it: a layer QEMU
   *    wrote always has a readable header naming the active layer as its backing;
   * 3. QEMU switches (`blockdev-snapshot-sync`: it drains the guest's I/O, flushes the active layer
   *    and reopens it read-only). Returns the milliseconds it took: the guest's disk stall.
   */
  private async switchToNewLayer(switchLayer: LayerSwitch, signal: AbortSignal | undefined): Promise<number> {
    const live = this.current.layers.length - this.baseLength + this.unpublished.length;
    if (live >= LIVE_CHECKPOINT_LAYERS_MAX) {
      throw new VmError(
        "VM_CHECKPOINT_LIMIT",
        `the run of ${this.dir} already added ${live} layers through live checkpoints, the most one run keeps; its writes stay in the run until it stops`,
        {
          hint: "stop and start the VM: the stop merges them, and checkpoints go on",
          details: { dir: this.dir, live },
        },
      );
    }
    const active = this.unpublished.at(-1)!;
    const next = newLayerName();
    const file = path.join(this.dir, next);
    const backOut = async () => {
      await fsp.rm(file, { force: true });
      // Best effort: a record naming a missing or empty `next` layer is harmless to recovery.
      await writeRunRecord(this.dir, this.record(this.unpublished)).catch(() => undefined);
    };
    try {
      await writeRunRecord(this.dir, this.record([...this.unpublished, next]));
      await this.qemuImg.createOverlay(file, active, "qcow2", this.current.sizeBytes, signal, { unsafe: true });
      await fsyncFile(file);
      await fsyncDir(this.dir);
    } catch (error) {
      await backOut();
      throw this.failure(error, "creating the next layer");
    }
    const mark = writeMark(file);
    const started = performance.now();
    try {
      await switchLayer(file);
    } catch (error) {
      if (error instanceof LayerSwitchRefused) {
        await backOut();
        throw this.failure(error, "switching QEMU to the next layer");
      }
      // QEMU may have switched (no answer in time): the new layer is taken as written. Either way
      // that is sound: if QEMU never switched, it is an empty layer over the one QEMU still
      // writes, and publishing both later reads exactly what QEMU wrote. Deleting it instead
      // could delete the layer QEMU writes now. No mark: the next checkpoint switches again
      // before it publishes anything, so a layer QEMU might still write is never published.
      this.unpublished.push(next);
      this.activeMark = undefined;
      throw this.failure(error, "switching QEMU to the next layer");
    }
    const stallMs = performance.now() - started;
    this.unpublished.push(next);
    this.activeMark = mark;
    return stallMs;
  }

  /**
   * Publishes the layers QEMU no longer writes (all but the active one): fsynced, then appended to
   * the pointer (generation + 1). The pointer's rename is the commit point. Then the run record
   * names only the active layer; a crash before that leaves a record whose first layers the
   * pointer already holds, which the next open skips.
   */
  private async publishInactive(grown: boolean): Promise<Omit<LiveDiskCheckpoint, "stallMs">> {
    const inactive = this.unpublished.slice(0, -1);
    if (inactive.length === 0) {
      return { generation: this.current.generation, changed: false, commitMs: 0, bytes: 0 };
    }
    const started = performance.now();
    let bytes = 0;
    const next: DiskPointer = {
      ...this.current,
      layers: [...this.current.layers, ...inactive],
      grown,
      generation: this.current.generation + 1,
      updatedAt: new Date().toISOString(),
    };
    try {
      // QEMU flushed them when it switched; make them durable from here too before the pointer
      // names them, so even a power loss cannot make the pointer outrun the data.
      for (const layer of inactive) {
        await fsyncFile(path.join(this.dir, layer));
        bytes += (await fsp.stat(path.join(this.dir, layer))).blocks * 512;
      }
      await writePointer(this.dir, next);
    } catch (error) {
      // A failure after the rename (the directory's fsync) still flipped it: learn which.
      const onDisk = await readPointer(this.dir).catch(() => undefined);
      if (!onDisk || onDisk.generation !== next.generation) throw this.failure(error, "publishing the checkpoint");
    }
    this.current = next;
    this.unpublished = this.unpublished.slice(-1);
    await writeRunRecord(this.dir, this.record(this.unpublished)).catch(() => undefined);
    return { generation: next.generation, changed: true, commitMs: performance.now() - started, bytes };
  }

  /** A live checkpoint's failure as the caller sees it: the previous checkpoint is current. */
  private failure(error: unknown, step: string): VmError {
    if (error instanceof VmError && error.code === "VM_CHECKPOINT_LIMIT") return error;
    if (isNoSpaceError(error)) return hostDiskFullError({ dir: this.dir, situation: "checkpoint", cause: error });
    return new VmError(
      "VM_CHECKPOINT_FAILED",
      `a checkpoint of the running disk ${this.dir} failed (${step}: ${messageOf(error)}); the previous checkpoint is still current and the run goes on`,
      { cause: error, details: { dir: this.dir, step } },
    );
  }

  async checkpoint(options: { grown: boolean; signal?: AbortSignal }): Promise<CheckpointResult> {
    this.assertOpen();
    this.finished = true;
    try {
      const started = performance.now();
      // QEMU has exited; its writes sit in the host page cache. Make them durable before the
      // pointer names these layers, so even a power loss cannot make the pointer outrun the data.
      for (const layer of this.unpublished) await fsyncFile(path.join(this.dir, layer));
      let current: DiskPointer = {
        ...this.current,
        layers: [...this.current.layers, ...this.unpublished],
        grown: options.grown,
        generation: this.current.generation + 1,
        updatedAt: new Date().toISOString(),
      };
      // The commit point: before this rename the old checkpoint is current, after it the new one.
      await writePointer(this.dir, current);
      const commitMs = performance.now() - started;
      // After the flip, never before: a record left by a crash here names layers the pointer
      // already holds, which the next open simply removes. Removed before the flip, a crash
      // in between would leave the run's layers unrecorded, and the next open would delete them.
      // Not fsynced and not fatal for the same reason: a stale record costs nothing.
      await removeRunRecord(this.dir).catch(() => undefined);
      const compactStarted = performance.now();
      let compactError: string | undefined;
      try {
        current = await compact(this.qemuImg, this.dir, current, { downTo: this.baseLength, signal: options.signal });
      } catch (error) {
        compactError = messageOf(error);
      }
      return {
        generation: current.generation,
        layers: current.layers,
        commitMs,
        compactMs: performance.now() - compactStarted,
        ...(compactError ? { compactError } : {}),
      };
    } catch (error) {
      if (isNoSpaceError(error)) {
        // The pointer was not replaced: the run's layers are orphans; give their space back now.
        const current = await readPointer(this.dir).catch(() => undefined);
        if (current && !this.unpublished.some((layer) => current.layers.includes(layer))) {
          await removeRunRecord(this.dir).catch(() => undefined);
          for (const layer of this.unpublished) await fsp.rm(path.join(this.dir, layer), { force: true });
        }
        throw hostDiskFullError({ dir: this.dir, situation: "stop", cause: error });
      }
      // The run record stays: the next open of the disk checks the run's layers and recovers them.
      throw new VmError(
        "VM_CHECKPOINT_FAILED",
        `saving the disk of ${this.dir} failed; the previous checkpoint is still current, and the next start tries to recover this run: ${messageOf(error)}`,
        { cause: error, details: { dir: this.dir } },
      );
    } finally {
      await removeQemuPidRecord(this.dir).catch(() => undefined);
      await this.lock.release();
    }
  }

  async release(): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    try {
      await removeQemuPidRecord(this.dir).catch(() => undefined);
    } finally {
      await this.lock.release();
    }
  }

  async discard(): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    try {
      // The record goes first, durably: a crash (even a power cut) after it leaves unrecorded
      // layers, which the next open deletes as orphans. The other order could leave both on
      // disk after a power cut (unlinks not yet durable), and the next open would recover a run
      // its owner chose to drop.
      await removeRunRecord(this.dir, { durable: true });
      for (const layer of this.unpublished) await fsp.rm(path.join(this.dir, layer), { force: true });
      await removeQemuPidRecord(this.dir).catch(() => undefined);
      // Live checkpoints published layers of this run: merged now, as a stop would, or every
      // dropped run after one would leave the chain longer for good.
      if (this.current.layers.length > this.baseLength) {
        await compact(this.qemuImg, this.dir, this.current, { downTo: this.baseLength }).catch(() => undefined);
      }
    } finally {
      await this.lock.release();
    }
  }

  private assertOpen(): void {
    if (this.finished) {
      throw new VmError("VM_CHECKPOINT_FAILED", `the run of ${this.dir} was already checkpointed or discarded`, {
        details: { dir: this.dir },
      });
    }
  }
}
