// A run whose owner died (SIGKILL, OOM, power cut) before its checkpoint or discard: the next open
// makes its layer the current checkpoint when it is sound, else moves it aside; and the listing
// and removal of set-aside layers.
import fsp from "node:fs/promises";
import path from "node:path";
import { writeJsonAtomic } from "@pi-sandbox/config";
import {
  readRunRecord,
  removeRunRecord,
  writePointer,
  MiB,
  type DiskPointer,
  type RunRecovery,
  type SetAsideLayer,
} from "./disk-layout.js";
import { compact } from "./disk-compact.js";
import { VmError, isVmError, messageOf } from "../errors.js";
import { LAYER_PATTERN, SET_ASIDE_DIR, TEMP_PREFIX, setAsideNoteName } from "../filenames.js";
import { fsyncDir, fsyncFile, readJsonIfExists } from "../fs-util.js";
import { removeKeptTemps } from "./kept-checkpoints.js";
import { QemuImg } from "./qemu-img.js";
import { removeSuspendState } from "./vm-memory.js";

/** The note beside a set-aside layer ({@link setAsideNoteName}). */
interface SetAsideNote {
  version: 1;
  /** The layer's name in the disk directory (also its name in the set-aside directory). */
  layer: string;
  /** Why it was not used. */
  reason: string;
  /** ISO time of the run's last write (the layer's mtime). */
  lastWriteAt: string;
  /** ISO time it was set aside. */
  at: string;
  /** The checkpoint generation the run was opened on: the layer only makes sense over that one. */
  generation: number;
  /** ISO time the run was opened. */
  openedAt: string;
}

/**
 * Deals with the run record an open finds (the caller holds the lock, has reaped a stray QEMU,
 * and has not yet removed orphans). No record: nothing to do. A stale record (its layers are in
 * the pointer already: a crash after a checkpoint's flip; or gone: a crash during a discard) is
 * removed. Otherwise the run's owner died mid-run: its layers (the one it opened with and those
 * its live checkpoints switched to since their last flip, `RunRecord.next`) are checked and,
 * when sound, published as the next checkpoint, exactly as its stop would have (crash-consistent,
 * like a power cut: the guest's journal replays it at boot); an unusable one is moved aside with
 * the layers over it, and the sound ones under it stay published. Returns the pointer to open
 * the new run on, and what happened.
 */
export async function recoverInterruptedRun(
  qemuImg: QemuImg,
  dir: string,
  pointer: DiskPointer,
  signal?: AbortSignal,
): Promise<{ pointer: DiskPointer; recovery?: RunRecovery }> {
  // First what keeps and removals of kept checkpoints that died left: their temp directories'
  // links to layers would stop the merges below.
  await removeKeptTemps(dir);
  const record = await readRunRecord(dir);
  if (record === undefined) return { pointer };
  const chain = record ? [record.layer, ...(record.next ?? [])] : [];
  // Layers a live checkpoint published before its owner died between its pointer flip and the
  // record naming only its new layer: behind us, and their flip counted one generation.
  let published = 0;
  while (published < chain.length && pointer.layers.includes(chain[published]!)) published++;
  const rest = chain.slice(published);
  const stats = await Promise.all(rest.map((layer) => fsp.stat(path.join(dir, layer)).catch(() => undefined)));
  if (!record || rest.length === 0 || !stats[0]?.isFile() || rest.some((layer) => pointer.layers.includes(layer))) {
    // Nothing of the run is left to lose. Kept, the record would be judged again at every open.
    await removeRunRecord(dir, { durable: true });
    return { pointer };
  }
  const openedOn = record.generation + (published > 0 ? 1 : 0);
  // Taken before the check: repairing leaks writes into a layer and would move its mtime.
  // `mtime`, not `mtimeMs`: Node rounds the former to the millisecond, and a Date made from the
  // latter truncates it, so the two told the same write apart by a millisecond half the time.
  const lastWriteAt = new Date(Math.max(...stats.map((stat) => stat?.mtime.getTime() ?? 0))).toISOString();
  const usable: string[] = [];
  let unusable: { at: number; reason: string } | undefined;
  if (openedOn !== pointer.generation) {
    unusable = {
      at: 0,
      reason: `it was opened on checkpoint ${openedOn}, but the disk is at checkpoint ${pointer.generation}`,
    };
  }
  for (let i = 0; unusable === undefined && i < rest.length; i++) {
    // A layer a live checkpoint named but never made: the run ends below it.
    if (!stats[i]?.isFile()) break;
    const backing =
      i === 0
        ? { layer: pointer.layers.at(-1)!, label: "the checkpoint's top layer" }
        : { layer: rest[i - 1]!, label: "the run's layer under it," };
    const judged = await unusableReason(qemuImg, path.join(dir, rest[i]!), backing, pointer.sizeBytes, signal);
    if (judged === undefined) {
      usable.push(rest[i]!);
      continue;
    }
    // A later layer is fsynced before QEMU is switched to it, so one without a sound header over
    // the layer below was never written: an empty leftover, removed as an orphan.
    if (i > 0 && judged.header) break;
    unusable = { at: i, reason: judged.reason };
  }
  let current = pointer;
  if (usable.length > 0) current = await publish(qemuImg, dir, pointer, usable, record.baseLength, signal);
  if (unusable === undefined) {
    await removeRunRecord(dir).catch(() => undefined);
    return {
      pointer: current,
      recovery: {
        outcome: "recovered",
        lastWriteAt,
        reopened: { generation: current.generation, at: current.updatedAt },
      },
    };
  }
  // Layers over an unusable one only make sense with it: they go aside too, as evidence.
  const aside = rest.slice(unusable.at).filter((_, i) => stats[unusable.at + i]?.isFile());
  let setAside: { path: string; bytes: number; reason: string } | undefined;
  for (const [i, layer] of aside.entries()) {
    const stat = stats[unusable.at + i]!;
    const reason = i === 0 ? unusable.reason : `the layer under it, ${aside[0]}, could not be used`;
    const moved = await moveAside(
      dir,
      { layer, generation: current.generation, openedAt: record.openedAt },
      {
        reason,
        lastWriteAt: stat.mtime.toISOString(),
        bytes: stat.blocks * 512,
      },
    );
    setAside ??= moved;
  }
  await removeRunRecord(dir, { durable: true });
  return {
    pointer: current,
    recovery: {
      outcome: "set-aside",
      lastWriteAt,
      reopened: { generation: current.generation, at: current.updatedAt },
      ...(setAside ? { setAside } : {}),
    },
  };
}

/**
 * Makes the interrupted run's (checked) layers the current checkpoint, then compacts as a stop
 * does (down to the chain's length when the run opened, or one step for a record without it).
 */
async function publish(
  qemuImg: QemuImg,
  dir: string,
  pointer: DiskPointer,
  layers: readonly string[],
  baseLength: number | undefined,
  signal: AbortSignal | undefined,
): Promise<DiskPointer> {
  // QEMU died, the host may not have: its writes can still sit in the page cache. Durable before
  // the pointer names the layers, as at a stop.
  for (const layer of layers) await fsyncFile(path.join(dir, layer));
  // A suspend that died after saving the memory but before its flip left memory naming the
  // generation this flip creates, from a guest whose disk is not this one (or, after a crashed
  // warm resume, memory of the previous generation, dead weight from now on). Removed durably
  // BEFORE the flip: the other order, with a crash in between, would resume that memory over
  // the recovered disk at the next start.
  await removeSuspendState(dir);
  await fsyncDir(dir);
  const recovered: DiskPointer = {
    ...pointer,
    layers: [...pointer.layers, ...layers],
    // As the pointer had it: a first boot that died mid-resize2fs runs it again, which is harmless.
    grown: pointer.grown,
    generation: pointer.generation + 1,
    updatedAt: new Date().toISOString(),
  };
  // The commit point, as at a stop: before this rename the old checkpoint is current, after it
  // the recovered one. A crash before it recovers again at the next open (the record is still
  // there); after it, the record names layers in the pointer and is just removed.
  await writePointer(dir, recovered);
  try {
    return await compact(qemuImg, dir, recovered, { ...(baseLength ? { downTo: baseLength } : {}), signal });
  } catch {
    // Not fatal, as at a stop: the chain is valid unmerged, and a later stop merges it.
    return recovered;
  }
}

/**
 * Why an interrupted run's layer cannot join the checkpoint, or undefined when it can: it must be
 * a qcow2 over `backing.layer` (the pointer's top, or the run's layer under it) with the disk's size and
 * no corrupt metadata (`header`: the header itself is wrong or unreadable). Leaked clusters
 * (allocated, never linked: what a QEMU killed mid-write leaves) are harmless and repaired.
 * Failures that say nothing about the layer (a busy disk, a full host disk, no qemu-img,
 * cancellation) are thrown: the layer is left as it is, recorded, for a later open to judge.
 */
async function unusableReason(
  qemuImg: QemuImg,
  file: string,
  backing: { layer: string; label: string },
  sizeBytes: number,
  signal: AbortSignal | undefined,
): Promise<{ reason: string; header: boolean } | undefined> {
  const options = signal ? { signal } : {};
  let checking = false;
  try {
    const info = await qemuImg.info(file, options);
    if (info.format !== "qcow2") {
      return { reason: `it is not a qcow2 image (qemu-img reads it as ${info.format})`, header: true };
    }
    if (info.backingFilename !== backing.layer) {
      return {
        reason: `its backing file is ${info.backingFilename ?? "missing"}, not ${backing.label} ${backing.layer}`,
        header: true,
      };
    }
    if (info.virtualSize !== sizeBytes) {
      return { reason: `its size is ${info.virtualSize} bytes, not the disk's ${sizeBytes}`, header: true };
    }
    checking = true;
    // Read-only first, so a corrupt layer is set aside as QEMU left it, not half repaired.
    const checked = await qemuImg.check(file, options);
    if (checked.leaksRemain) await qemuImg.check(file, { ...options, repairLeaks: true });
    return undefined;
  } catch (error) {
    if (signal?.aborted) throw error;
    if (isVmError(error, "VM_DISK_CORRUPT") || isVmError(error, "VM_DISK_FAILED")) {
      const said = typeof error.details.firstError === "string" ? error.details.firstError : qemuSaid(error);
      const reason = isVmError(error, "VM_DISK_CORRUPT")
        ? `qemu-img found it damaged: ${said}`
        : `qemu-img could not read it: ${said}`;
      return { reason, header: !checking };
    }
    throw error;
  }
}

function qemuSaid(error: VmError): string {
  const output = typeof error.details.qemuOutput === "string" ? error.details.qemuOutput : messageOf(error);
  const line = output.split("\n").find((l) => l.trim() !== "") ?? output;
  return line
    .replace(/^qemu-img: /, "")
    .trim()
    .slice(0, 300);
}

/**
 * Moves a layer into the set-aside directory (rename, never delete: it holds the user's last
 * work), with a note beside it. Each crash ordering is safe: before the rename the record still
 * names the layer and the next open judges it again (the note is simply rewritten); after it,
 * the record names a missing layer, which ends what the next open recovers.
 */
async function moveAside(
  dir: string,
  run: { layer: string; generation: number; openedAt: string },
  found: { reason: string; lastWriteAt: string; bytes: number },
): Promise<{ path: string; bytes: number; reason: string }> {
  const aside = path.join(dir, SET_ASIDE_DIR);
  await fsp.mkdir(aside, { recursive: true, mode: 0o700 });
  const note: SetAsideNote = {
    version: 1,
    layer: run.layer,
    reason: found.reason,
    lastWriteAt: found.lastWriteAt,
    at: new Date().toISOString(),
    generation: run.generation,
    openedAt: run.openedAt,
  };
  await writeJsonAtomic(path.join(aside, setAsideNoteName(run.layer)), note);
  const target = path.join(aside, run.layer);
  await fsp.rename(path.join(dir, run.layer), target);
  await fsyncDir(aside);
  await fsyncDir(dir);
  return { path: target, bytes: found.bytes, reason: found.reason };
}

/** The set-aside layers of a disk directory, oldest first (a layer without a readable note is listed too). */
export async function listSetAside(dir: string): Promise<SetAsideLayer[]> {
  const aside = path.join(dir, SET_ASIDE_DIR);
  let entries: string[];
  try {
    entries = await fsp.readdir(aside);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw error;
  }
  const layers: SetAsideLayer[] = [];
  for (const name of entries) {
    if (!LAYER_PATTERN.test(name)) continue;
    const file = path.join(aside, name);
    const stat = await fsp.stat(file).catch(() => undefined);
    if (!stat?.isFile()) continue;
    const note = parseNote(await readJsonIfExists(path.join(aside, setAsideNoteName(name))).catch(() => undefined));
    layers.push({
      name,
      path: file,
      bytes: stat.blocks * 512,
      at: note?.at ?? stat.ctime.toISOString(),
      lastWriteAt: note?.lastWriteAt ?? stat.mtime.toISOString(),
      reason: note?.reason ?? "unknown (its note is missing or unreadable)",
    });
  }
  return layers.sort((a, b) => a.at.localeCompare(b.at));
}

/**
 * Deletes the set-aside layer `name` (a name from {@link listSetAside}) with its note, or all of
 * them (and stray notes and temp files there) without a name. Returns what was removed. An unknown
 * or malformed name is VM_DISK_NOT_FOUND. Needs no lock: runs never read these files.
 */
export async function removeSetAside(dir: string, name?: string): Promise<SetAsideLayer[]> {
  const aside = path.join(dir, SET_ASIDE_DIR);
  const listed = await listSetAside(dir);
  const chosen = name === undefined ? listed : listed.filter((layer) => layer.name === name);
  if (name !== undefined && chosen.length === 0) {
    throw new VmError("VM_DISK_NOT_FOUND", `no layer named ${JSON.stringify(name)} is set aside in ${dir}`, {
      hint: "take a name from the disk's set-aside list (inspect)",
      details: { dir, name },
    });
  }
  for (const layer of chosen) {
    await fsp.rm(layer.path, { force: true });
    await fsp.rm(path.join(aside, setAsideNoteName(layer.name)), { force: true });
  }
  if (name === undefined) {
    // Notes whose layer is gone (a crash between writing a note and moving its layer), torn temp files.
    const left = await fsp.readdir(aside).catch(() => [] as string[]);
    for (const entry of left) {
      const strayNote = entry.endsWith(".json") && !left.includes(entry.slice(0, -".json".length));
      if (strayNote || entry.startsWith(TEMP_PREFIX)) await fsp.rm(path.join(aside, entry), { force: true });
    }
  }
  if (chosen.length > 0) await fsyncDir(aside).catch(() => undefined);
  return chosen;
}

function parseNote(raw: unknown): SetAsideNote | undefined {
  const note = raw as Partial<SetAsideNote> | undefined;
  const valid =
    note?.version === 1 &&
    typeof note.reason === "string" &&
    typeof note.at === "string" &&
    typeof note.lastWriteAt === "string";
  return valid ? (note as SetAsideNote) : undefined;
}

/**
 * The one-line notice for the user about a recovery, e.g. "recovered the disk as of 14:03:12 (its
 * controller stopped without a checkpoint); the guest's journal replays it".
 */
export function recoveryNotice(recovery: RunRecovery, now = new Date()): string {
  if (recovery.outcome === "recovered") {
    return `recovered the disk as of ${clockOf(recovery.lastWriteAt, now)} (its controller stopped without a checkpoint); the guest's journal replays it`;
  }
  const aside = recovery.setAside;
  const where = aside ? `; set aside: ${aside.path} (${Math.ceil(aside.bytes / MiB)} MiB)` : "";
  return `could not use the interrupted run (${aside?.reason ?? "unusable"}); reopened the checkpoint of ${clockOf(recovery.reopened.at, now)}${where}`;
}

/** Local wall-clock time of an ISO time: "14:03:12" today, "2025-03-01 14:03:12" otherwise. */
function clockOf(iso: string, now: Date): string {
  const when = new Date(iso);
  if (Number.isNaN(when.getTime())) return iso;
  const pad = (n: number) => String(n).padStart(2, "0");
  const day = `${when.getFullYear()}-${pad(when.getMonth() + 1)}-${pad(when.getDate())}`;
  const today = `${now.getFullYear()}-${pad(now.getMonth() + 1)}-${pad(now.getDate())}`;
  const clock = `${pad(when.getHours())}:${pad(when.getMinutes())}:${pad(when.getSeconds())}`;
  return day === today ? clock : `${day} ${clock}`;
}
