// One run of a disk: its writable top layer, the checkpoint that makes it current, and compaction.
import fsp from "node:fs/promises";
import path from "node:path";
import { VmError, messageOf } from "./errors.js";
import { fsyncDir, fsyncFile } from "./fs-util.js";
import { hostDiskFullError, hostSpaceOf, isNoSpaceError } from "./host-disk.js";
import { type DiskLock } from "./disk-lock.js";
import { type RecordedImage } from "./image.js";
import { QemuImg } from "./qemu-img.js";
import { removeQemuPidRecord } from "./qemu-process.js";
import {
  MiB,
  MERGE_HEADROOM_BYTES,
  readPointer,
  removeRunRecord,
  writePointer,
  type DiskPointer,
  type CheckpointResult,
  type DiskRun,
  type RunRecovery,
} from "./disk-layout.js";

/** One run of a disk: the layer QEMU writes, published by checkpoint() or dropped by discard(). */
export class OpenRun implements DiskRun {
  private finished = false;
  readonly layerPath: string;
  readonly image: RecordedImage;

  constructor(
    private readonly qemuImg: QemuImg,
    readonly dir: string,
    readonly pointer: DiskPointer,
    private readonly layer: string,
    private readonly lock: DiskLock,
    readonly reapedPid: number | undefined,
    readonly recovery?: RunRecovery,
  ) {
    this.layerPath = path.join(dir, layer);
    this.image = pointer.image;
  }

  async checkpoint(options: { grown: boolean; signal?: AbortSignal }): Promise<CheckpointResult> {
    this.assertOpen();
    this.finished = true;
    try {
      const started = performance.now();
      // QEMU has exited; its writes sit in the host page cache. Make them durable before the
      // pointer names this layer, so even a power loss cannot make the pointer outrun the data.
      await fsyncFile(this.layerPath);
      let current: DiskPointer = {
        ...this.pointer,
        layers: [...this.pointer.layers, this.layer],
        grown: options.grown,
        generation: this.pointer.generation + 1,
        updatedAt: new Date().toISOString(),
      };
      // The commit point: before this rename the old checkpoint is current, after it the new one.
      await writePointer(this.dir, current);
      const commitMs = performance.now() - started;
      // After the flip, never before: a record left by a crash here names a layer the pointer
      // already holds, which the next open simply removes. Removed before the flip, a crash
      // in between would leave the run's layer unrecorded, and the next open would delete it.
      // Not fsynced and not fatal for the same reason: a stale record costs nothing.
      await removeRunRecord(this.dir).catch(() => undefined);
      const compactStarted = performance.now();
      let compactError: string | undefined;
      try {
        current = await compact(this.qemuImg, this.dir, current, options.signal);
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
        // The pointer was not replaced: the run's layer is an orphan; give its space back now.
        const current = await readPointer(this.dir).catch(() => undefined);
        if (current && !current.layers.includes(this.layer)) {
          await removeRunRecord(this.dir).catch(() => undefined);
          await fsp.rm(this.layerPath, { force: true });
        }
        throw hostDiskFullError({ dir: this.dir, situation: "stop", cause: error });
      }
      // The run record stays: the next open of the disk checks the run's layer and recovers it.
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
      // The record goes first, durably: a crash (even a power cut) after it leaves an unrecorded
      // layer, which the next open deletes as an orphan. The other order could leave both on
      // disk after a power cut (unlinks not yet durable), and the next open would recover a run
      // its owner chose to drop.
      await removeRunRecord(this.dir, { durable: true });
      await fsp.rm(this.layerPath, { force: true });
      await removeQemuPidRecord(this.dir).catch(() => undefined);
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

/**
 * Keeps the chain short: if the parent of the top layer is referenced only by this directory
 * (link count 1 — not shared with a template or another instance), merge the top into it, make
 * the parent current, then delete the top. One step only: its cost follows the data written in
 * the run, never the size of older layers (older layers are never merged into each other, e.g. a
 * former template layer that became exclusive when its template was destroyed). Crash-safe: `qemu-img commit`
 * writes into the parent only clusters the top also holds, so "parent + top" reads the same
 * before, during and after the merge; the pointer moves to the parent only once it is durable.
 */
export async function compact(
  qemuImg: QemuImg,
  dir: string,
  pointer: DiskPointer,
  signal?: AbortSignal,
): Promise<DiskPointer> {
  if (pointer.layers.length < 2) return pointer;
  const top = pointer.layers.at(-1)!;
  const parent = pointer.layers.at(-2)!;
  const parentStat = await fsp.stat(path.join(dir, parent));
  if (parentStat.nlink !== 1) return pointer;
  // The merge may grow the parent by up to the top's data. Without that much room it would stop
  // halfway on ENOSPC; the chain is valid as it is, so leave the merge to a later stop.
  const topBytes = (await fsp.stat(path.join(dir, top))).blocks * 512;
  const space = hostSpaceOf(dir);
  if (space && space.freeBytes < topBytes + MERGE_HEADROOM_BYTES) {
    throw new Error(
      `not merged: ${Math.ceil(topBytes / MiB)} MiB to merge but ${Math.floor(space.freeBytes / MiB)} MiB free on ${space.mountPoint}; a later stop merges it`,
    );
  }
  await qemuImg.commitIntoBacking(path.join(dir, top), signal);
  await fsyncFile(path.join(dir, parent));
  const current = { ...pointer, layers: pointer.layers.slice(0, -1), updatedAt: new Date().toISOString() };
  await writePointer(dir, current);
  await fsp.rm(path.join(dir, top), { force: true });
  await fsyncDir(dir);
  return current;
}
