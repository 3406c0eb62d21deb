import { randomBytes } from "node:crypto";
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { VmError, messageOf } from "./errors.js";
import { allocatedBytes, fsyncDir, fsyncFile, readJsonIfExists, writeFileAtomic } from "./fs-util.js";
import { checkDiskSize } from "./host.js";
import { hostDiskFullError, hostSpaceOf, isNoSpaceError } from "./host-disk.js";
import { acquireDiskLock, acquireDiskLockWaiting, type DiskLock } from "./disk-lock.js";
import { recordImage, resolveImage, verifyRecordedImage, type GuestImage, type RecordedImage } from "./image.js";
import { QemuImg } from "./qemu-img.js";
import { QEMU_PID_FILE, reapStrayQemu, removeQemuPidRecord } from "./qemu-process.js";

/** The pointer file naming a disk's current layer chain. Replaced atomically; never edited in place. */
export const POINTER_FILE = "disk.json";
const LAYER_PATTERN = /^layer-[0-9a-f]{16}\.qcow2$/;
const GiB = 1024 ** 3;
const MiB = 1024 ** 2;
/** Free space a layer merge keeps beyond the data it may write (qcow2 metadata, the pointer). */
const MERGE_HEADROOM_BYTES = 16 * MiB;

/** Instances boot and change; templates are immutable sources of new instances. */
export type DiskKind = "instance" | "template";

/** Contents of {@link POINTER_FILE}. */
export interface DiskPointer {
  /** Format version. */
  version: 1;
  /** Instance or template. */
  kind: DiskKind;
  /** Layer file names in this directory, bottom (backed by the image rootfs) to top. */
  layers: string[];
  /** Guest-visible disk size in bytes. */
  sizeBytes: number;
  /** The image the bottom layer is backed by, with the rootfs identity at creation. */
  image: RecordedImage;
  /** Whether the guest filesystem was already grown to `sizeBytes` (else the next boot runs resize2fs). */
  grown: boolean;
  /** Completed checkpoints of this disk (0 = never booted). */
  generation: number;
  /** ISO time of the last change. */
  updatedAt: string;
}

/** What {@link DiskStore.inspect} reports. */
export interface DiskInfo {
  /** The disk directory. */
  dir: string;
  /** Instance or template. */
  kind: DiskKind;
  /** Guest-visible size in bytes. */
  sizeBytes: number;
  /** Layer files, bottom to top. */
  layers: string[];
  /** Host bytes of all layers (layers shared with templates or other instances count fully). */
  allocatedBytes: number;
  /** Host bytes of the layers only this directory references (link count 1). */
  exclusiveBytes: number;
  /** The image the disk depends on. */
  image: RecordedImage;
  /** Whether the guest filesystem fills the disk already. */
  grown: boolean;
  /** Completed checkpoints. */
  generation: number;
  /** ISO time of the last change. */
  updatedAt: string;
}

/** How a stop's checkpoint went. */
export interface CheckpointResult {
  /** The new generation (now current). */
  generation: number;
  /** Layers after compaction, bottom to top. */
  layers: string[];
  /** Milliseconds to make the new state durable and current (fsync + pointer flip). */
  commitMs: number;
  /** Milliseconds spent merging layers afterwards (proportional to data written in the run). */
  compactMs: number;
  /** Set when the optional merge failed; the checkpoint itself is complete and current. */
  compactError?: string;
}

/** A disk opened for one boot: an exclusive lock plus a fresh top layer the VM writes into. */
export interface DiskRun {
  /** The disk directory. */
  readonly dir: string;
  /** The pointer that was current when the run began. */
  readonly pointer: DiskPointer;
  /** Absolute path of the run's writable qcow2 layer (give it to QEMU). */
  readonly layerPath: string;
  /** The image to boot (kernel/initramfs must match the disk's rootfs). */
  readonly image: RecordedImage;
  /** Whether a stale owner's QEMU was killed while opening. */
  readonly reapedPid: number | undefined;
  /**
   * Makes the run's layer the current checkpoint (after QEMU has exited and the guest synced),
   * then merges layers to keep the chain short, and releases the disk.
   */
  checkpoint(options: { grown: boolean; signal?: AbortSignal }): Promise<CheckpointResult>;
  /** Drops everything the run wrote, keeps the previous checkpoint, and releases the disk. */
  discard(): Promise<void>;
}

function newLayerName(): string {
  return `layer-${randomBytes(8).toString("hex")}.qcow2`;
}

function diskBytesOf(diskGiB: number): number {
  return Math.ceil((diskGiB * GiB) / MiB) * MiB;
}

function rootfsFormat(file: string): "raw" | "qcow2" {
  return /\.qcow2?$/i.test(file) ? "qcow2" : "raw";
}

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

  /** Reads a disk's pointer and sizes. */
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
      image: pointer.image,
      grown: pointer.grown,
      generation: pointer.generation,
      updatedAt: pointer.updatedAt,
    };
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
      typeof options.image === "object"
        ? options.image
        : await resolveImage(options.image, this.stateRoot ? { stateRoot: this.stateRoot } : {});
    const recorded = await recordImage(image);
    const sizeBytes = diskBytesOf(options.diskGiB);
    if (sizeBytes < recorded.rootfsBytes) {
      throw new VmError(
        "VM_RESOURCES_UNSUPPORTED",
        `diskGiB ${options.diskGiB} is smaller than the image's root filesystem (${(recorded.rootfsBytes / GiB).toFixed(2)} GiB); raise diskGiB`,
        { details: { diskGiB: options.diskGiB, rootfsBytes: recorded.rootfsBytes } },
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
   * Makes an immutable template from a stopped instance: its layers are hard-linked (O(1), no
   * copy), so the template and the instance share them; from then on neither writes into them.
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
      await verifyRecordedImage(template.image);
      let sizeBytes = template.sizeBytes;
      if (options.diskGiB !== undefined) {
        checkDiskSize(options.diskGiB);
        sizeBytes = diskBytesOf(options.diskGiB);
        if (sizeBytes < template.sizeBytes) {
          throw new VmError(
            "VM_RESOURCES_UNSUPPORTED",
            `diskGiB ${options.diskGiB} is smaller than the template's disk (${template.sizeBytes / GiB} GiB); disks can only grow`,
            { details: { diskGiB: options.diskGiB, templateBytes: template.sizeBytes } },
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
        if (entry === "lock.json") continue;
        await fsp.rm(path.join(dir, entry), { recursive: true, force: true });
      }
    } finally {
      await lock.release();
    }
    await fsp.rm(dir, { recursive: true, force: true });
  }

  /**
   * Opens an instance disk for one boot: takes the lock (VM_DISK_BUSY if a live process holds it),
   * kills a QEMU left by a dead owner, checks the chain and the image, removes orphan files of an
   * interrupted run, and creates the run's new top layer over the current one.
   */
  async openRun(dir: string, options: { signal?: AbortSignal } = {}): Promise<DiskRun> {
    await requireDir(dir);
    const lock = await acquireDiskLock(dir, "run");
    try {
      const reaped = await reapStrayQemu(dir);
      const pointer = await requirePointer(dir);
      if (pointer.kind !== "instance") {
        throw new VmError(
          "VM_DISK_FAILED",
          `${dir} holds a template; templates never boot — create an instance from it`,
          {
            details: { dir },
          },
        );
      }
      await this.requireLayers(dir, pointer);
      await verifyRecordedImage(pointer.image);
      await removeOrphans(dir, pointer.layers);
      options.signal?.throwIfAborted();
      const layer = newLayerName();
      await this.qemuImg.createOverlay(
        path.join(dir, layer),
        pointer.layers.at(-1)!,
        "qcow2",
        undefined,
        options.signal,
      );
      return new OpenRun(this.qemuImg, dir, pointer, layer, lock, reaped.killedPid);
    } catch (error) {
      await lock.release();
      throw error;
    }
  }

  private async requireLayers(dir: string, pointer: DiskPointer): Promise<void> {
    for (const layer of pointer.layers) {
      try {
        await fsp.access(path.join(dir, layer), fs.constants.R_OK);
      } catch (error) {
        throw new VmError(
          "VM_DISK_CORRUPT",
          `the disk in ${dir} names the layer ${layer}, which is missing; the disk cannot be opened — destroy and recreate it`,
          { cause: error, details: { dir, layer } },
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
        throw new VmError("VM_DISK_EXISTS", `a disk already exists in ${dir}; destroy it first or pick another name`, {
          details: { dir },
        });
      }
      // Leftovers of a creation that crashed before its pointer was written.
      await removeOrphans(dir, []);
      return lock;
    } catch (error) {
      await lock.release();
      throw error;
    }
  }
}

class OpenRun implements DiskRun {
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
        if (current && !current.layers.includes(this.layer)) await fsp.rm(this.layerPath, { force: true });
        throw hostDiskFullError({ dir: this.dir, situation: "stop", cause: error });
      }
      throw new VmError(
        "VM_CHECKPOINT_FAILED",
        `saving the disk of ${this.dir} failed; the previous checkpoint is still current: ${messageOf(error)}`,
        { cause: error, details: { dir: this.dir } },
      );
    } finally {
      await removeQemuPidRecord(this.dir).catch(() => undefined);
      await this.lock.release();
    }
  }

  async discard(): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    try {
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
async function compact(
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

async function requireDir(dir: string): Promise<string> {
  try {
    const stat = await fsp.stat(dir);
    if (stat.isDirectory()) return dir;
  } catch {
    // fall through
  }
  throw new VmError("VM_DISK_NOT_FOUND", `there is no disk in ${dir}`, { details: { dir } });
}

async function readPointer(dir: string): Promise<DiskPointer | undefined> {
  let raw: unknown;
  try {
    raw = await readJsonIfExists(path.join(dir, POINTER_FILE));
  } catch (error) {
    throw new VmError("VM_DISK_CORRUPT", `the disk pointer ${path.join(dir, POINTER_FILE)} is unreadable`, {
      cause: error,
      details: { dir },
    });
  }
  if (raw === undefined) return undefined;
  const pointer = raw as Partial<DiskPointer>;
  const valid =
    pointer.version === 1 &&
    (pointer.kind === "instance" || pointer.kind === "template") &&
    Array.isArray(pointer.layers) &&
    pointer.layers.length > 0 &&
    pointer.layers.every((layer) => typeof layer === "string" && LAYER_PATTERN.test(layer)) &&
    typeof pointer.sizeBytes === "number" &&
    typeof pointer.image?.rootfsPath === "string";
  if (!valid) {
    throw new VmError("VM_DISK_CORRUPT", `the disk pointer ${path.join(dir, POINTER_FILE)} is malformed`, {
      details: { dir },
    });
  }
  return pointer as DiskPointer;
}

async function requirePointer(dir: string): Promise<DiskPointer> {
  const pointer = await readPointer(dir);
  if (!pointer) throw new VmError("VM_DISK_NOT_FOUND", `there is no disk in ${dir}`, { details: { dir } });
  return pointer;
}

async function writePointer(dir: string, pointer: DiskPointer): Promise<void> {
  await writeFileAtomic(path.join(dir, POINTER_FILE), JSON.stringify(pointer, null, 2) + "\n");
}

/** Deletes layer files not in `keep` and temp files of interrupted writes. Caller holds the lock. */
async function removeOrphans(dir: string, keep: readonly string[]): Promise<string[]> {
  const removed: string[] = [];
  for (const entry of await fsp.readdir(dir)) {
    const orphanLayer = LAYER_PATTERN.test(entry) && !keep.includes(entry);
    // `.tmp-lock-*` belong to lock attempts in flight (removed by their owners); keep them.
    const leftover =
      (entry.startsWith(".tmp-") && !entry.startsWith(".tmp-lock-")) ||
      entry.startsWith(".stale-lock-") ||
      entry === QEMU_PID_FILE;
    if (!orphanLayer && !leftover) continue;
    await fsp.rm(path.join(dir, entry), { force: true });
    removed.push(entry);
  }
  if (removed.length > 0) await fsyncDir(dir);
  return removed;
}

/** Hard-links layer files (falls back to a reflink-or-copy across file systems). */
async function linkLayers(from: string, to: string, layers: readonly string[], signal?: AbortSignal): Promise<void> {
  for (const layer of layers) {
    signal?.throwIfAborted();
    const source = path.join(from, layer);
    const target = path.join(to, layer);
    try {
      await fsp.link(source, target);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== "EXDEV" && code !== "EPERM" && code !== "ENOTSUP" && code !== "EMLINK") throw error;
      // Different file system: a copy-on-write clone where supported, else a full copy.
      await fsp.copyFile(source, target, fs.constants.COPYFILE_FICLONE);
      await fsyncFile(target);
    }
  }
  await fsyncDir(to);
}

/** Total host bytes of the files in a directory, counting each hard-linked inode once per call. */
export async function directoryAllocatedBytes(dir: string, options: { exclusiveOnly?: boolean } = {}): Promise<number> {
  let total = 0;
  for (const entry of await fsp.readdir(dir)) {
    const stat = await fsp.stat(path.join(dir, entry)).catch(() => undefined);
    if (!stat?.isFile()) continue;
    if (options.exclusiveOnly && stat.nlink !== 1) continue;
    total += await allocatedBytes(path.join(dir, entry));
  }
  return total;
}
