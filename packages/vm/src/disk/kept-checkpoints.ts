// Kept checkpoints of an instance disk: named states the user (or Pi, turn by turn) can rewind to
// or fork from. Each is a directory `checkpoints/<id>/` beside the disk holding hard links to the
// layers of the chain as it was (and, for a memory checkpoint, to the saved memory), its pointer
// and a small record. A hard link is what keeps the state: a layer with more than one link is never
// merged into (see disk-compact.ts), so the chain below a kept checkpoint stays as it was, and its
// bytes are shared with the disk until the disk's own chain moves on.
import { randomBytes } from "node:crypto";
import fsp from "node:fs/promises";
import path from "node:path";
import { writeFileAtomic } from "@pi-sandbox/config";
import { VmError, messageOf } from "../errors.js";
import { fsyncDir, readJsonIfExists } from "../fs-util.js";
import { linkLayers, readPointer, removeRunRecord, writePointer, type DiskPointer } from "./disk-layout.js";
import { MEMORY_FILE, TEMP_PREFIX } from "../filenames.js";
import { linkSuspendState, removeSuspendState, settleSuspendState } from "./vm-memory.js";

/** The directory of kept checkpoints inside a disk directory. */
export const CHECKPOINTS_DIR = "checkpoints";
/** A kept checkpoint's record inside its directory. */
const RECORD_FILE = "checkpoint.json";
/** Ids are 12 lowercase hex digits: checked before one becomes a path. */
const ID_PATTERN = /^[0-9a-f]{12}$/;

/** What the caller asks to keep with a checkpoint. */
export interface KeepOptions {
  /** Its id (12 hex digits) when the caller chose one beforehand (say, to name it inside the guest first); default a new random one. */
  id?: string;
  /** The user's name for it (the caller validates it; never used as a path). */
  label?: string;
  /** Pinned checkpoints are never pruned. */
  pinned?: boolean;
  /** Keep the saved memory too (the disk must have one for its current checkpoint). */
  memory?: boolean;
  /** The caller's own JSON kept with it (the controller's agent door and previews). */
  extra?: unknown;
}

/** A kept checkpoint as recorded. */
export interface KeptCheckpoint {
  version: 1;
  /** 12 hex digits, unique in the disk. */
  id: string;
  label?: string;
  pinned: boolean;
  /** ISO time it was kept. */
  createdAt: string;
  /** Whether the guest's memory is kept with it (a rewind resumes it). */
  memory: boolean;
  /** The disk's checkpoint generation it holds. */
  generation: number;
  /** Layer files of the chain it holds, bottom to top. */
  layers: string[];
  extra?: unknown;
}

/** A kept checkpoint with the host bytes only kept checkpoints hold (see {@link listKept}). */
export interface KeptCheckpointInfo extends KeptCheckpoint {
  /** Host bytes of its files that neither the disk's current chain nor an older kept checkpoint holds. */
  bytes: number;
}

/** The directory of one kept checkpoint; `id` is checked first (it may come from a user). */
export function keptDir(diskDir: string, id: string): string {
  if (!ID_PATTERN.test(id)) {
    throw new VmError("VM_CHECKPOINT_NOT_FOUND", `${JSON.stringify(id)} is not a checkpoint id`, {
      hint: "checkpoint ids are 12 hex digits; list them with checkpoints",
      details: { id },
    });
  }
  return path.join(diskDir, CHECKPOINTS_DIR, id);
}

/**
 * Keeps the disk's current checkpoint (`pointer`, the one on disk now) under a new id. The caller
 * holds the disk: its lock, or its run between live checkpoints. Built in a temp directory and
 * renamed into place: a crash leaves either nothing or a whole checkpoint (and a temp directory
 * the next keep removes).
 */
export async function keepCheckpoint(dir: string, pointer: DiskPointer, options: KeepOptions): Promise<KeptCheckpoint> {
  const root = path.join(dir, CHECKPOINTS_DIR);
  await fsp.mkdir(root, { recursive: true, mode: 0o700 });
  await removeTemps(root);
  const id = options.id ?? randomBytes(6).toString("hex");
  const target = keptDir(dir, id);
  if (await fsp.stat(target).catch(() => undefined)) {
    throw new VmError("VM_CHECKPOINT_FAILED", `${dir} already keeps a checkpoint ${id}`, { details: { dir, id } });
  }
  const temp = path.join(root, `${TEMP_PREFIX}${id}`);
  await fsp.mkdir(temp, { mode: 0o700 });
  try {
    await linkLayers(dir, temp, pointer.layers);
    if (options.memory && !(await linkSuspendState(dir, temp, pointer.generation, pointer.generation))) {
      throw new VmError(
        "VM_CHECKPOINT_FAILED",
        `${dir} has no saved memory for its current checkpoint, so no memory checkpoint can be kept`,
        { hint: "keep a disk checkpoint, or suspend the instance first", details: { dir } },
      );
    }
    const kept: KeptCheckpoint = {
      version: 1,
      id,
      ...(options.label !== undefined ? { label: options.label } : {}),
      pinned: options.pinned === true,
      createdAt: new Date().toISOString(),
      memory: options.memory === true,
      generation: pointer.generation,
      layers: [...pointer.layers],
      ...(options.extra !== undefined ? { extra: options.extra } : {}),
    };
    await writePointer(temp, pointer);
    await writeFileAtomic(path.join(temp, RECORD_FILE), JSON.stringify(kept, null, 2) + "\n");
    await fsyncDir(temp);
    await fsp.rename(temp, target);
    await fsyncDir(root);
    return kept;
  } catch (error) {
    await fsp.rm(temp, { recursive: true, force: true }).catch(() => undefined);
    if (error instanceof VmError) throw error;
    throw new VmError("VM_CHECKPOINT_FAILED", `keeping a checkpoint of ${dir} failed: ${messageOf(error)}`, {
      cause: error,
      details: { dir },
    });
  }
}

/** Reads one kept checkpoint's record; undefined when it is missing or not one. */
async function readKept(dir: string, id: string): Promise<KeptCheckpoint | undefined> {
  const raw = (await readJsonIfExists(path.join(keptDir(dir, id), RECORD_FILE)).catch(() => undefined)) as
    Partial<KeptCheckpoint> | undefined;
  if (!raw || raw.version !== 1 || raw.id !== id || !Array.isArray(raw.layers)) return undefined;
  return raw as KeptCheckpoint;
}

/**
 * The kept checkpoints of a disk, oldest first. `bytes` counts each file once: a layer the disk's
 * current chain still holds costs nothing more, one that only kept checkpoints hold is counted for
 * the oldest of them.
 */
export async function listKept(dir: string): Promise<KeptCheckpointInfo[]> {
  const root = path.join(dir, CHECKPOINTS_DIR);
  let names: string[];
  try {
    names = await fsp.readdir(root);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw error;
  }
  const kept: KeptCheckpoint[] = [];
  for (const name of names) {
    if (!ID_PATTERN.test(name)) continue;
    const one = await readKept(dir, name);
    if (one) kept.push(one);
  }
  kept.sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  const seen = new Set<string>();
  const current = await readPointer(dir).catch(() => undefined);
  for (const layer of current?.layers ?? []) {
    const stat = await fsp.stat(path.join(dir, layer)).catch(() => undefined);
    if (stat) seen.add(`${stat.dev}:${stat.ino}`);
  }
  const result: KeptCheckpointInfo[] = [];
  for (const one of kept) {
    let bytes = 0;
    const files = [...one.layers, ...(one.memory ? [MEMORY_FILE] : [])];
    for (const file of files) {
      const stat = await fsp.stat(path.join(keptDir(dir, one.id), file)).catch(() => undefined);
      if (!stat) continue;
      const key = `${stat.dev}:${stat.ino}`;
      if (seen.has(key)) continue;
      seen.add(key);
      bytes += stat.blocks * 512;
    }
    result.push({ ...one, bytes });
  }
  return result;
}

/**
 * Removes a kept checkpoint: renamed out of the way first (a crash leaves a temp directory, never
 * half a checkpoint), then deleted. Its layers stay wherever another link holds them.
 */
export async function removeKept(dir: string, id: string): Promise<KeptCheckpoint> {
  const kept = await requireKept(dir, id);
  const root = path.join(dir, CHECKPOINTS_DIR);
  const temp = path.join(root, `${TEMP_PREFIX}rm-${id}`);
  await fsp.rename(keptDir(dir, id), temp);
  await fsyncDir(root);
  await fsp.rm(temp, { recursive: true, force: true });
  return kept;
}

/** The kept checkpoint `id`, or VM_CHECKPOINT_NOT_FOUND. */
export async function requireKept(dir: string, id: string): Promise<KeptCheckpoint> {
  const kept = await readKept(dir, id);
  if (!kept) {
    throw new VmError("VM_CHECKPOINT_NOT_FOUND", `there is no checkpoint ${id} of ${dir}`, {
      hint: "list them with checkpoints",
      details: { dir, id },
    });
  }
  return kept;
}

/**
 * Makes the kept checkpoint `id` the disk's current state (the caller holds the disk's lock, and no
 * run is open): its layers are linked back, its memory (if kept) becomes the disk's saved memory,
 * and the pointer flips to its chain with a new generation. What the disk held after it is
 * dropped: the previous saved memory and any interrupted run first (durably), its layers at the
 * next open (orphans). The pointer's rename is the commit point: before it the disk is as it was
 * (memory gone: the next start boots cold), after it the disk is the checkpoint. The memory's
 * record stays pending until after the flip, and the disk's next open finishes or drops it
 * ({@link settleSuspendState}).
 */
export async function rewindTo(dir: string, id: string): Promise<{ kept: KeptCheckpoint; pointer: DiskPointer }> {
  const kept = await requireKept(dir, id);
  const from = keptDir(dir, id);
  const keptPointer = await readPointer(from);
  const current = await readPointer(dir);
  if (!keptPointer || !current) {
    throw new VmError("VM_DISK_CORRUPT", `the checkpoint ${id} of ${dir} or the disk itself has no pointer`, {
      details: { dir, id },
    });
  }
  await removeRunRecord(dir, { durable: true });
  await removeSuspendState(dir);
  const missing: string[] = [];
  for (const layer of kept.layers) {
    const [a, b] = await Promise.all([
      fsp.stat(path.join(dir, layer)).catch(() => undefined),
      fsp.stat(path.join(from, layer)),
    ]);
    if (a && (a.ino !== b.ino || a.dev !== b.dev)) {
      throw new VmError("VM_DISK_CORRUPT", `the disk ${dir} holds a different ${layer} than its checkpoint ${id}`, {
        details: { dir, id, layer },
      });
    }
    if (!a) missing.push(layer);
  }
  await linkLayers(from, dir, missing);
  const pointer: DiskPointer = {
    ...keptPointer,
    kind: "instance",
    generation: current.generation + 1,
    updatedAt: new Date().toISOString(),
  };
  if (kept.memory) await linkSuspendState(from, dir, kept.generation, pointer.generation, { pending: true });
  await writePointer(dir, pointer);
  await settleSuspendState(dir, pointer.generation);
  return { kept, pointer };
}

/**
 * Removes what keeps and removals a crash interrupted (`checkpoints/.tmp-*`) when the disk is
 * opened (the caller holds it: no keep is in flight). Left in place, their hard links would hold
 * the chain's layers back from every merge until the next keep.
 */
export async function removeKeptTemps(dir: string): Promise<void> {
  await removeTemps(path.join(dir, CHECKPOINTS_DIR)).catch((error: unknown) => {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  });
}

/** Removes temp directories of keeps and removals a crash interrupted. */
async function removeTemps(root: string): Promise<void> {
  for (const name of await fsp.readdir(root)) {
    if (name.startsWith(TEMP_PREFIX)) await fsp.rm(path.join(root, name), { recursive: true, force: true });
  }
}
