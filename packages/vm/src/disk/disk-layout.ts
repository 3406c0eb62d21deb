// Types and file operations of a disk directory (pointer, layers, orphans), shared by the store
// and its runs; the directory's file names are in filenames.ts.
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { writeFileAtomic, writeJsonAtomic } from "@pi-sandbox/config";
import { VmError } from "../errors.js";
import { allocatedBytes, fsyncDir, fsyncFile, readJsonIfExists } from "../fs-util.js";
import { type RecordedImage } from "../image/image.js";
import {
  LAYER_PATTERN,
  LOCK_TEMP_PREFIX,
  POINTER_FILE,
  QEMU_PID_FILE,
  RUN_RECORD_FILE,
  STALE_LOCK_PREFIX,
  TEMP_PREFIX,
} from "../filenames.js";

export const GiB = 1024 ** 3;
export const MiB = 1024 ** 2;
/** Free space a layer merge keeps beyond the data it may write (qcow2 metadata, the pointer). */
export const MERGE_HEADROOM_BYTES = 16 * MiB;

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
  /** Host bytes of a saved memory state (a suspend's memory file and its record; 0 when none). */
  memoryBytes: number;
  /** The image the disk depends on. */
  image: RecordedImage;
  /** Whether the guest filesystem fills the disk already. */
  grown: boolean;
  /** Completed checkpoints. */
  generation: number;
  /** ISO time of the last change. */
  updatedAt: string;
  /** Layers of interrupted runs that could not be used, moved aside (oldest first; empty when none). */
  setAside: SetAsideLayer[];
}

/** A layer of an interrupted run that {@link DiskStore.openRun} could not use and moved aside. */
export interface SetAsideLayer {
  /** Its file name in the set-aside directory: what {@link DiskStore.removeSetAside} takes. */
  name: string;
  /** Absolute path of the layer file. */
  path: string;
  /** Host bytes it occupies. */
  bytes: number;
  /** ISO time it was set aside. */
  at: string;
  /** ISO time of the interrupted run's last write (the layer's mtime then). */
  lastWriteAt: string;
  /** Why it was not used. */
  reason: string;
}

/** What openRun did with a run its owner never finished (the controller died, the host lost power). */
export interface RunRecovery {
  /** "recovered": the interrupted run's layer is now the current checkpoint; "set-aside": it could not be used and was moved aside, the previous checkpoint is current. */
  outcome: "recovered" | "set-aside";
  /** ISO time of the interrupted run's last write (its layer's mtime). */
  lastWriteAt: string;
  /** The checkpoint this run opens on: its generation and ISO time (the pointer's updatedAt). */
  reopened: { generation: number; at: string };
  /** For "set-aside": where the layer is now, its host bytes and why it was not used. */
  setAside?: { path: string; bytes: number; reason: string };
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

/** How a live checkpoint went on the disk's side (see {@link DiskRun.liveCheckpoint}). */
export interface LiveDiskCheckpoint {
  /** The current generation afterwards (unchanged when nothing was written since the last one). */
  generation: number;
  /** False when QEMU wrote nothing since the last checkpoint: nothing new was published. */
  changed: boolean;
  /** Milliseconds QEMU took to switch to the new layer (it drains and flushes the guest's disk I/O meanwhile); 0 when unchanged. */
  stallMs: number;
  /** Milliseconds to make the published layers durable and flip the pointer. */
  commitMs: number;
  /** Host bytes of the layers that became part of the checkpoint. */
  bytes: number;
}

/**
 * Switches the running QEMU's writes to the new layer `file` (whose backing is the layer QEMU
 * writes now). Throws {@link LayerSwitchRefused} when QEMU certainly did not switch; any other
 * failure leaves it unknown, and the new layer is then treated as written (safe either way).
 */
export type LayerSwitch = (file: string) => Promise<void>;

/** QEMU refused to switch layers (or was never asked): it still writes the previous layer. */
export class LayerSwitchRefused extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "LayerSwitchRefused";
  }
}

/** A disk opened for one boot: an exclusive lock plus a fresh top layer the VM writes into. */
export interface DiskRun {
  /** The disk directory. */
  readonly dir: string;
  /** The current pointer: the one the run began on, then each live checkpoint's. */
  readonly pointer: DiskPointer;
  /** Absolute path of the run's first writable qcow2 layer (give it to QEMU at boot). */
  readonly layerPath: string;
  /** Absolute path of the layer QEMU writes now (the boot layer until a live checkpoint switches). */
  readonly activeLayerPath: string;
  /** The image to boot (kernel/initramfs must match the disk's rootfs). */
  readonly image: RecordedImage;
  /** Whether a stale owner's QEMU was killed while opening. */
  readonly reapedPid: number | undefined;
  /** Set when the open found a run whose owner died before its checkpoint or discard: what became of it. */
  readonly recovery?: RunRecovery;
  /**
   * Makes the run's layer the current checkpoint (after QEMU has exited and the guest synced),
   * then merges layers to keep the chain short, and releases the disk.
   */
  checkpoint(options: { grown: boolean; signal?: AbortSignal }): Promise<CheckpointResult>;
  /**
   * While QEMU runs: makes everything written so far a completed checkpoint. Creates the next
   * layer over the active one, has `switchLayer` move QEMU's writes to it, then publishes the
   * layers QEMU no longer writes (fsync, pointer flip). Nothing to publish (QEMU wrote nothing
   * since the last one): `changed` false, no new layer, unless `force`. The run stays open.
   */
  liveCheckpoint(options: {
    grown: boolean;
    switchLayer: LayerSwitch;
    signal?: AbortSignal;
    force?: boolean;
  }): Promise<LiveDiskCheckpoint>;
  /** Milliseconds since the epoch of QEMU's last write to the active layer (its mtime); undefined when unreadable. */
  activeWrittenAtMs(): number | undefined;
  /** Drops everything the run wrote since its last checkpoint, keeps that checkpoint, and releases the disk. */
  discard(): Promise<void>;
  /**
   * Releases the disk without deciding about the run: its layer and run record stay, so the next
   * openRun recovers it. For a run whose QEMU died on its own: what it wrote is the newest state.
   */
  release(): Promise<void>;
}

export function diskBytesOf(diskGiB: number): number {
  return Math.ceil((diskGiB * GiB) / MiB) * MiB;
}

export async function requireDir(dir: string): Promise<string> {
  try {
    const stat = await fsp.stat(dir);
    if (stat.isDirectory()) return dir;
  } catch {
    // fall through
  }
  throw new VmError("VM_DISK_NOT_FOUND", `there is no disk in ${dir}`, { details: { dir } });
}

export async function readPointer(dir: string): Promise<DiskPointer | undefined> {
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

export async function requirePointer(dir: string): Promise<DiskPointer> {
  const pointer = await readPointer(dir);
  if (!pointer) throw new VmError("VM_DISK_NOT_FOUND", `there is no disk in ${dir}`, { details: { dir } });
  return pointer;
}

export async function writePointer(dir: string, pointer: DiskPointer): Promise<void> {
  await writeFileAtomic(path.join(dir, POINTER_FILE), JSON.stringify(pointer, null, 2) + "\n");
}

/** Contents of {@link RUN_RECORD_FILE}: the run in progress. */
export interface RunRecord {
  /** Format version. */
  version: 1;
  /** The run's layer file name (in the disk directory). */
  layer: string;
  /** The pointer's generation when the record was written (its layer's backing is that pointer's top). */
  generation: number;
  /** ISO time the run was opened. */
  openedAt: string;
  /**
   * Layers over `layer`, bottom to top, each backed by the one before: the layers a live
   * checkpoint created and switched QEMU to (the last may never have been switched to, if the
   * owner died during the switch). Absent: the run has one layer.
   */
  next?: string[];
  /** The pointer's layer count when the run was opened: compaction merges the run's layers down to it. */
  baseLength?: number;
}

/**
 * Records the run about to start, durably (atomic write, directory fsynced): from then on a dead
 * owner's run is found and recovered instead of being taken for an orphan.
 */
export async function writeRunRecord(dir: string, record: RunRecord): Promise<void> {
  await writeJsonAtomic(path.join(dir, RUN_RECORD_FILE), record);
}

/**
 * The run record of `dir`, if any. A torn or foreign record reads as `null`: a record is written
 * atomically, so an unreadable one was never a run's and names nothing to recover.
 */
export async function readRunRecord(dir: string): Promise<RunRecord | null | undefined> {
  const raw = await readJsonIfExists(path.join(dir, RUN_RECORD_FILE)).catch(() => null);
  if (raw === undefined) return undefined;
  const record = raw as Partial<RunRecord> | null;
  const valid =
    record?.version === 1 &&
    typeof record.layer === "string" &&
    LAYER_PATTERN.test(record.layer) &&
    Number.isSafeInteger(record.generation) &&
    typeof record.openedAt === "string" &&
    (record.next === undefined ||
      (Array.isArray(record.next) && record.next.every((l) => typeof l === "string" && LAYER_PATTERN.test(l)))) &&
    (record.baseLength === undefined || (Number.isSafeInteger(record.baseLength) && record.baseLength > 0));
  return valid ? (record as RunRecord) : null;
}

/** Removes the run record; `durable` also fsyncs the directory. */
export async function removeRunRecord(dir: string, options: { durable?: boolean } = {}): Promise<void> {
  await fsp.rm(path.join(dir, RUN_RECORD_FILE), { force: true });
  if (options.durable) await fsyncDir(dir);
}

/**
 * Deletes layer files not in `keep` and temp files of interrupted writes. Caller holds the lock,
 * and has already dealt with an interrupted run's layer (disk-recovery.ts): that layer is not in
 * the pointer either, and deleting it here was how a crash lost a whole run. Only top-level files
 * are considered: the set-aside directory is never touched.
 */
export async function removeOrphans(dir: string, keep: readonly string[]): Promise<string[]> {
  const removed: string[] = [];
  for (const entry of await fsp.readdir(dir)) {
    const orphanLayer = LAYER_PATTERN.test(entry) && !keep.includes(entry);
    // `.tmp-lock-*` belong to lock attempts in flight (removed by their owners); keep them.
    const leftover =
      (entry.startsWith(TEMP_PREFIX) && !entry.startsWith(LOCK_TEMP_PREFIX)) ||
      entry.startsWith(STALE_LOCK_PREFIX) ||
      entry === QEMU_PID_FILE;
    if (!orphanLayer && !leftover) continue;
    await fsp.rm(path.join(dir, entry), { force: true });
    removed.push(entry);
  }
  if (removed.length > 0) await fsyncDir(dir);
  return removed;
}

/** Hard-links layer files (falls back to a reflink-or-copy across file systems). */
export async function linkLayers(
  from: string,
  to: string,
  layers: readonly string[],
  signal?: AbortSignal,
): Promise<void> {
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
