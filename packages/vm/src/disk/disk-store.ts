// The disk store: creating, cloning, inspecting, destroying and opening runs of instance and
// template disks.
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { VmError } from "../errors.js";
import { fsyncDir, fsyncFile } from "../fs-util.js";
import { checkDiskSize } from "../host/host-facts.js";
import { acquireDiskLock, acquireDiskLockWaiting, reapStrayQemu, type DiskLock } from "./disk-lock.js";
import { recordImage, resolveImage, verifyRecordedImage, type GuestImage } from "../image/image.js";
import { rootfsFormat } from "../image/image-assets.js";
import { QemuImg } from "./qemu-img.js";
import { linkSuspendState, removeSuspendState, suspendStateBytes } from "./vm-memory.js";
import { LOCK_FILE, POINTER_FILE, newLayerName } from "../filenames.js";
import {
  GiB,
  diskBytesOf,
  requireDir,
  readPointer,
  requirePointer,
  writePointer,
  writeRunRecord,
  removeRunRecord,
  removeOrphans,
  linkLayers,
  type DiskPointer,
  type DiskInfo,
  type DiskRun,
  type SetAsideLayer,
} from "./disk-layout.js";
import { listSetAside, recoverInterruptedRun, removeSetAside } from "./disk-recovery.js";
import { OpenRun, compact } from "./disk-run.js";
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
    const lock = await this.prepareNewDir(dir, "create");
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
   * Makes an immutable template from a stopped or suspended instance: its layers are hard-linked
   * (O(1), no copy), so the template and the instance share them; from then on neither writes into
   * them. A suspended instance's saved memory is linked too: instances made from the template then
   * resume it instead of booting.
   */
  async createTemplate(
    sourceDir: string,
    templateDir: string,
    options: { signal?: AbortSignal } = {},
  ): Promise<DiskInfo> {
    const sourceLock = await acquireDiskLock(await requireDir(sourceDir), "template");
    try {
      const source = await requirePointer(sourceDir);
      await this.requireLayers(sourceDir, source);
      const lock = await this.prepareNewDir(templateDir, "create-template");
      try {
        await linkLayers(sourceDir, templateDir, source.layers, options.signal);
        // A suspended source leaves its memory to the template: instances made from it resume.
        await linkSuspendState(sourceDir, templateDir, source.generation, source.generation);
        await writePointer(templateDir, { ...source, kind: "template", updatedAt: new Date().toISOString() });
      } finally {
        await lock.release();
      }
    } finally {
      await sourceLock.release();
    }
    return this.inspect(templateDir);
  }

  /**
   * Creates an instance from a template by hard-linking the template's immutable layers: time and
   * space do not depend on the template's size, and removing the template later only drops its own
   * links. `diskGiB` larger than the template's size adds a layer with the bigger virtual size.
   * A template with saved memory gives the instance a link to it (its first start resumes the
   * template's guest), except with a larger disk, which the saved guest would not know.
   */
  async createFromTemplate(
    templateDir: string,
    dir: string,
    options: { diskGiB?: number; signal?: AbortSignal } = {},
  ): Promise<DiskInfo> {
    const templateLock = await acquireDiskLockWaiting(await requireDir(templateDir), "clone", 60_000);
    try {
      const template = await requirePointer(templateDir);
      if (template.kind !== "template") {
        throw new VmError("VM_DISK_FAILED", `${templateDir} holds an instance disk, not a template`, {
          details: { dir: templateDir },
        });
      }
      await this.requireLayers(templateDir, template);
      await verifyRecordedImage(template.image, this.imageChecks());
      let sizeBytes = template.sizeBytes;
      if (options.diskGiB !== undefined) {
        checkDiskSize(options.diskGiB);
        sizeBytes = diskBytesOf(options.diskGiB);
        if (sizeBytes < template.sizeBytes) {
          throw new VmError(
            "VM_RESOURCES_UNSUPPORTED",
            `diskGiB ${options.diskGiB} is smaller than the template's disk (${template.sizeBytes / GiB} GiB)`,
            { hint: "disks can only grow", details: { diskGiB: options.diskGiB, templateBytes: template.sizeBytes } },
          );
        }
      }
      const lock = await this.prepareNewDir(dir, "create");
      try {
        await linkLayers(templateDir, dir, template.layers, options.signal);
        const layers = [...template.layers];
        let grown = template.grown;
        if (sizeBytes > template.sizeBytes) {
          const layer = newLayerName();
          await this.qemuImg.createOverlay(path.join(dir, layer), layers.at(-1)!, "qcow2", sizeBytes, options.signal);
          await fsyncFile(path.join(dir, layer));
          layers.push(layer);
          grown = false;
        }
        if (sizeBytes === template.sizeBytes) await linkSuspendState(templateDir, dir, template.generation, 0);
        await writePointer(dir, {
          ...template,
          kind: "instance",
          layers,
          sizeBytes,
          grown,
          generation: 0,
          updatedAt: new Date().toISOString(),
        });
      } finally {
        await lock.release();
      }
    } finally {
      await templateLock.release();
    }
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
      await this.requireLayers(dir, pointer);
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
      await this.requireLayers(dir, pointer);
      await removeOrphans(dir, pointer.layers);
      return kept;
    } finally {
      await lock.release();
    }
  }

  /**
   * A new instance disk in `dir` that shares every layer of the instance disk in `sourceDir` (hard
   * links: O(1) in the disk's size) and its saved memory, if it has one for its current checkpoint:
   * the fork's first boot resumes it. Neither disk writes the shared layers again (a layer with
   * more than one link is never merged into). The source must not run (VM_DISK_BUSY).
   */
  async fork(sourceDir: string, dir: string, options: { signal?: AbortSignal } = {}): Promise<DiskInfo> {
    const sourceLock = await acquireDiskLock(await requireDir(sourceDir), "fork");
    try {
      const source = await requirePointer(sourceDir);
      if (source.kind !== "instance") {
        throw new VmError("VM_DISK_FAILED", `${sourceDir} holds a template; make an instance from it instead`, {
          details: { dir: sourceDir },
        });
      }
      await this.requireLayers(sourceDir, source);
      const lock = await this.prepareNewDir(dir, "fork");
      try {
        await linkLayers(sourceDir, dir, source.layers, options.signal);
        await linkSuspendState(sourceDir, dir, source.generation, 0);
        await writePointer(dir, { ...source, generation: 0, updatedAt: new Date().toISOString() });
      } finally {
        await lock.release();
      }
    } finally {
      await sourceLock.release();
    }
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
      await this.requireLayers(dir, pointer);
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

  private async requireLayers(dir: string, pointer: DiskPointer): Promise<void> {
    for (const layer of pointer.layers) {
      try {
        await fsp.access(path.join(dir, layer), fs.constants.R_OK);
      } catch (error) {
        throw new VmError(
          "VM_DISK_CORRUPT",
          `the disk in ${dir} names the layer ${layer}, which is missing; the disk cannot be opened`,
          { hint: "destroy and recreate it", cause: error, details: { dir, layer } },
        );
      }
    }
  }

  /** Creates (or reuses an empty/incomplete) directory for a new disk and locks it. */
  private async prepareNewDir(dir: string, purpose: string): Promise<DiskLock> {
    await fsp.mkdir(dir, { recursive: true, mode: 0o700 });
    const lock = await acquireDiskLock(dir, purpose);
    try {
      if (await readPointer(dir)) {
        throw new VmError("VM_DISK_EXISTS", `a disk already exists in ${dir}`, {
          hint: "destroy it first or pick another name",
          details: { dir },
        });
      }
      // Leftovers of a creation that crashed before its pointer was written.
      await removeOrphans(dir, []);
      await removeSuspendState(dir);
      await removeRunRecord(dir);
      return lock;
    } catch (error) {
      await lock.release();
      throw error;
    }
  }
}
