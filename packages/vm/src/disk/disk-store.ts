// The disk store: creating, cloning, inspecting, destroying and opening runs of instance and
// template disks.
import fsp from "node:fs/promises";
import path from "node:path";
import { VmError } from "../errors.js";
import { fsyncDir, fsyncFile } from "../fs-util.js";
import { checkDiskSize } from "../host/host-facts.js";
import { acquireDiskLock, reapStrayQemu } from "./disk-lock.js";
import { recordImage, resolveImage, verifyRecordedImage, type GuestImage } from "../image/image.js";
import { rootfsFormat } from "../image/image-assets.js";
import { QemuImg } from "./qemu-img.js";
import { removeSuspendState, settleSuspendState, suspendStateBytes } from "./vm-memory.js";
import { LOCK_FILE, POINTER_FILE, newLayerName } from "../filenames.js";
import {
  GiB,
  diskBytesOf,
  requireDir,
  readPointer,
  requirePointer,
  writePointer,
  writeRunRecord,
  removeOrphans,
  type DiskInfo,
  type DiskRun,
  type SetAsideLayer,
} from "./disk-layout.js";
import { listSetAside, recoverInterruptedRun, removeSetAside } from "./disk-recovery.js";
import { OpenRun, compact } from "./disk-run.js";
import { createFromTemplate, createTemplate, forkDisk, prepareNewDir, requireLayers } from "./disk-copies.js";
import {
  keepCheckpoint,
  listKept,
  removeKept,
  rewindTo,
  type KeepOptions,
  type KeptCheckpoint,
  type KeptCheckpointInfo,
} from "./kept-checkpoints.js";

export {
  directoryAllocatedBytes,
  type CheckpointResult,
  type DiskInfo,
  type DiskKind,
  type DiskPointer,
  type DiskRun,
  type LiveDiskCheckpoint,
  type RunRecovery,
  type SetAsideLayer,
} from "./disk-layout.js";
export { LIVE_CHECKPOINT_LAYERS_MAX } from "./disk-run.js";
export { recoveryNotice } from "./disk-recovery.js";
export type { KeepOptions, KeptCheckpoint, KeptCheckpointInfo } from "./kept-checkpoints.js";

/**
 * Owns the disk files inside instance and template directories (the caller owns where those
 * directories are and everything else around them). See the package README for the layout and the
 * crash-safety argument.
 */
export class DiskStore {
  private readonly qemuImg: QemuImg;
  private readonly stateRoot: string | undefined;

  constructor(options: { qemuImg?: QemuImg; stateRoot?: string } = {}) {
    this.qemuImg = options.qemuImg ?? new QemuImg();
    this.stateRoot = options.stateRoot;
  }

  /** Whether `dir` holds a complete disk. */
  async exists(dir: string): Promise<boolean> {
    return (await readPointer(dir).catch(() => undefined)) !== undefined;
  }

  /** Reads a disk's pointer and sizes, and lists the layers of interrupted runs set aside. */
  async inspect(dir: string): Promise<DiskInfo> {
    const pointer = await requirePointer(dir);
    let total = 0;
    let exclusive = 0;
    for (const layer of pointer.layers) {
      const file = path.join(dir, layer);
      const stat = await fsp.stat(file).catch(() => undefined);
      if (!stat) continue;
      total += stat.blocks * 512;
      if (stat.nlink === 1) exclusive += stat.blocks * 512;
    }
    return {
      dir,
      kind: pointer.kind,
      sizeBytes: pointer.sizeBytes,
      layers: [...pointer.layers],
      allocatedBytes: total,
      exclusiveBytes: exclusive,
      memoryBytes: await suspendStateBytes(dir),
      image: pointer.image,
      grown: pointer.grown,
      generation: pointer.generation,
      updatedAt: pointer.updatedAt,
      setAside: await listSetAside(dir),
    };
  }

  /**
   * Deletes the set-aside layer `name` (`DiskInfo.setAside[].name`) and its note, or every one
   * without a name: the user's decision that an interrupted run which could not be recovered is
   * not worth keeping. Returns what was removed; an unknown name is VM_DISK_NOT_FOUND. Works while
   * the disk runs (a run never reads these files).
   */
  async removeSetAside(dir: string, name?: string): Promise<SetAsideLayer[]> {
    await requireDir(dir);
    return removeSetAside(dir, name);
  }

  /**
   * Creates a fresh instance disk of `diskGiB` from an image: one sparse qcow2 layer backed by the
   * image's immutable rootfs, with the virtual size set now (the guest filesystem grows on first boot).
   */
  async createDisk(
    dir: string,
    options: { image?: string | GuestImage; diskGiB: number; signal?: AbortSignal },
  ): Promise<DiskInfo> {
    checkDiskSize(options.diskGiB);
    options.signal?.throwIfAborted();
    const image =
      typeof options.image === "object" ? options.image : await resolveImage(options.image, this.imageChecks());
    const recorded = await recordImage(image);
    const sizeBytes = diskBytesOf(options.diskGiB);
    if (sizeBytes < recorded.rootfsBytes) {
      throw new VmError(
        "VM_RESOURCES_UNSUPPORTED",
        `diskGiB ${options.diskGiB} is smaller than the image's root filesystem (${(recorded.rootfsBytes / GiB).toFixed(2)} GiB)`,
        { hint: "raise diskGiB", details: { diskGiB: options.diskGiB, rootfsBytes: recorded.rootfsBytes } },
      );
    }
    const lock = await prepareNewDir(dir, "create");
    try {
      const layer = newLayerName();
      await this.qemuImg.createOverlay(
        path.join(dir, layer),
        recorded.rootfsPath,
        rootfsFormat(recorded.rootfsPath),
        sizeBytes,
        options.signal,
      );
      await fsyncFile(path.join(dir, layer));
      await writePointer(dir, {
        version: 1,
        kind: "instance",
        layers: [layer],
        sizeBytes,
        image: recorded,
        grown: sizeBytes <= recorded.rootfsBytes,
        generation: 0,
        updatedAt: new Date().toISOString(),
      });
    } finally {
      await lock.release();
    }
    return this.inspect(dir);
  }

  /**
   * Makes an immutable template from a stopped or suspended instance (see disk-copies.ts): the
   * layers and a suspend's memory are hard-linked, so instances made from it resume that memory.
   */
  async createTemplate(
    sourceDir: string,
    templateDir: string,
    options: { signal?: AbortSignal } = {},
  ): Promise<DiskInfo> {
    await createTemplate(sourceDir, templateDir, options);
    return this.inspect(templateDir);
  }

  /**
   * An instance from a template by hard links (see disk-copies.ts); a larger `diskGiB` adds a layer,
   * and the template's saved memory comes along unless the disk grew.
   */
  async createFromTemplate(
    templateDir: string,
    dir: string,
    options: { diskGiB?: number; signal?: AbortSignal } = {},
  ): Promise<DiskInfo> {
    await createFromTemplate(this.qemuImg, this.imageChecks(), templateDir, dir, options);
    return this.inspect(dir);
  }

  /**
   * Removes a disk directory. The pointer goes first (a crash halfway leaves "no disk", never a
   * half-deleted one that looks valid). Layers shared with templates or other instances survive
   * through their other links. Fails with VM_DISK_BUSY while the disk runs.
   */
  async destroy(dir: string): Promise<void> {
    await requireDir(dir);
    const lock = await acquireDiskLock(dir, "destroy");
    try {
      await reapStrayQemu(dir);
      await fsp.rm(path.join(dir, POINTER_FILE), { force: true });
      await fsyncDir(dir);
      for (const entry of await fsp.readdir(dir)) {
        if (entry === LOCK_FILE) continue;
        await fsp.rm(path.join(dir, entry), { recursive: true, force: true });
      }
    } finally {
      await lock.release();
    }
    await fsp.rm(dir, { recursive: true, force: true });
  }

  /**
   * Deletes the memory a suspend saved with the disk's checkpoint (a no-op without one): the next
   * boot is cold, from the same checkpoint. Fails with VM_DISK_BUSY while the disk runs.
   */
  async dropSavedMemory(dir: string): Promise<void> {
    await requireDir(dir);
    const lock = await acquireDiskLock(dir, "drop-memory");
    try {
      await removeSuspendState(dir);
    } finally {
      await lock.release();
    }
  }

  /** The kept checkpoints of a disk, oldest first, with the bytes only they hold (see kept-checkpoints.ts). */
  async checkpoints(dir: string): Promise<KeptCheckpointInfo[]> {
    await requireDir(dir);
    return listKept(dir);
  }

  /**
   * Keeps the current checkpoint of an instance disk that does not run (a running one keeps its
   * checkpoints through `RunningVm.checkpoint({keep})`); `memory`: its saved memory too (a
   * suspended disk). VM_DISK_BUSY while it runs.
   */
  async keepCheckpoint(dir: string, options: KeepOptions): Promise<KeptCheckpoint> {
    await requireDir(dir);
    const lock = await acquireDiskLock(dir, "checkpoint");
    try {
      const pointer = await requirePointer(dir);
      await requireLayers(dir, pointer);
      await settleSuspendState(dir, pointer.generation);
      return await keepCheckpoint(dir, pointer, options);
    } finally {
      await lock.release();
    }
  }

  /**
   * Removes a kept checkpoint. Its layers stay wherever another link holds them (the disk's chain,
   * other checkpoints). When the disk does not run, the top of its chain is merged as far down as
   * its layers are its own again; a running disk's stop does that.
   */
  async removeCheckpoint(dir: string, id: string): Promise<KeptCheckpoint> {
    await requireDir(dir);
    const removed = await removeKept(dir, id);
    const lock = await acquireDiskLock(dir, "merge").catch(() => undefined);
    if (!lock) return removed;
    try {
      const pointer = await readPointer(dir);
      if (pointer?.kind === "instance") await compact(this.qemuImg, dir, pointer, { downTo: 1 }).catch(() => undefined);
    } finally {
      await lock.release();
    }
    return removed;
  }

  /**
   * Makes the kept checkpoint `id` the disk's current state; what the disk held after it goes
   * (keep it first to come back to it). The disk must not run (VM_DISK_BUSY).
   */
  async rewind(dir: string, id: string): Promise<KeptCheckpoint> {
    await requireDir(dir);
    const lock = await acquireDiskLock(dir, "rewind");
    try {
      await reapStrayQemu(dir);
      const { kept, pointer } = await rewindTo(dir, id);
      await requireLayers(dir, pointer);
      await removeOrphans(dir, pointer.layers);
      return kept;
    } finally {
      await lock.release();
    }
  }

  /**
   * A new instance disk sharing every layer of a stopped or suspended instance and its saved memory
   * (see disk-copies.ts): the fork's first boot resumes it. VM_DISK_BUSY while the source runs.
   * With `checkpoint`, of that kept checkpoint instead (its memory too, if kept), while the source
   * runs or not; VM_CHECKPOINT_NOT_FOUND when it has none such.
   */
  async fork(
    sourceDir: string,
    dir: string,
    options: { signal?: AbortSignal; checkpoint?: string } = {},
  ): Promise<DiskInfo> {
    await forkDisk(sourceDir, dir, options);
    return this.inspect(dir);
  }

  /**
   * Opens an instance disk for one boot: takes the lock (VM_DISK_BUSY if a live process holds it),
   * kills a QEMU left by a dead owner, checks the chain and the image, recovers a run whose owner
   * died (its layer becomes the current checkpoint, or is set aside when unusable: see
   * `DiskRun.recovery`), removes orphan files, creates the run's new top layer over the current
   * one and records the run.
   */
  async openRun(dir: string, options: { signal?: AbortSignal } = {}): Promise<DiskRun> {
    await requireDir(dir);
    const lock = await acquireDiskLock(dir, "run");
    try {
      const reaped = await reapStrayQemu(dir);
      const pointer = await requirePointer(dir);
      if (pointer.kind !== "instance") {
        throw new VmError("VM_DISK_FAILED", `${dir} holds a template; templates never boot`, {
          hint: "create an instance from it",
          details: { dir },
        });
      }
      await requireLayers(dir, pointer);
      await settleSuspendState(dir, pointer.generation);
      await verifyRecordedImage(pointer.image, this.imageChecks());
      // After the reap (a layer is never judged while a QEMU may still write it) and before the
      // orphan sweep, which would otherwise delete the interrupted run's layer and its work.
      const interrupted = await recoverInterruptedRun(this.qemuImg, dir, pointer, options.signal);
      const current = interrupted.pointer;
      await removeOrphans(dir, current.layers);
      options.signal?.throwIfAborted();
      const layer = newLayerName();
      await this.qemuImg.createOverlay(
        path.join(dir, layer),
        current.layers.at(-1)!,
        "qcow2",
        undefined,
        options.signal,
      );
      // Recorded durably before QEMU can write into the layer, with its header durable too: a
      // record never names a layer a power cut could have left empty. Without the record, this
      // run's layer would be an orphan to the next open, and a crash would lose the whole run.
      await fsyncFile(path.join(dir, layer));
      const openedAt = new Date().toISOString();
      await writeRunRecord(dir, {
        version: 1,
        layer,
        generation: current.generation,
        openedAt,
        baseLength: current.layers.length,
      });
      return new OpenRun(this.qemuImg, dir, current, layer, lock, reaped.killedPid, openedAt, interrupted.recovery);
    } catch (error) {
      await lock.release();
      throw error;
    }
  }

  /** Where image checks remember the checksums they verified: this store's state root, if any. */
  private imageChecks(): { stateRoot?: string } {
    return this.stateRoot ? { stateRoot: this.stateRoot } : {};
  }
}
