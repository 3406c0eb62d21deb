// Compaction of a disk's layer chain after a run: the layers the run published are merged into the
// exclusive layer below them, so a chain never grows from run to run.
import fsp from "node:fs/promises";
import path from "node:path";
import { fsyncDir, fsyncFile } from "../fs-util.js";
import { hostSpaceOf } from "../host/host-disk.js";
import { MiB, MERGE_HEADROOM_BYTES, writePointer, type DiskPointer } from "./disk-layout.js";
import { QemuImg } from "./qemu-img.js";

/**
 * Keeps the chain short after a run (QEMU must be gone: it holds write locks on the chain). The
 * top layer and the exclusive layers under it (link count 1: not shared with a template or another
 * instance) are merged into the lowest of those, but never below `downTo` layers: the chain's
 * length when the run opened, so only the run's own layers (its stop's, and each live
 * checkpoint's) and the layer it opened on are involved. Older layers are never merged into each
 * other (e.g. a former template layer that became exclusive when its template was destroyed), so
 * the cost follows the data written in the run. Default `downTo`: one step (top into its parent).
 *
 * Crash-safe: `qemu-img commit` writes into the base only clusters a layer above it also holds,
 * with the data the chain reads there, so "base + layers above" reads the same before, during and
 * after the merge; the pointer moves to the base only once the base is durable, and the merged
 * layers are deleted only after that flip (deleted first, a crash would leave a pointer naming
 * missing layers).
 */
export async function compact(
  qemuImg: QemuImg,
  dir: string,
  pointer: DiskPointer,
  options: { downTo?: number; signal?: AbortSignal } = {},
): Promise<DiskPointer> {
  const layers = pointer.layers;
  if (layers.length < 2) return pointer;
  const lowest = Math.max(0, (options.downTo ?? layers.length - 1) - 1);
  let base = -1;
  for (let i = layers.length - 2; i >= lowest; i--) {
    const stat = await fsp.stat(path.join(dir, layers[i]!));
    if (stat.nlink !== 1) break;
    base = i;
  }
  if (base < 0) return pointer;
  const merged = layers.slice(base + 1);
  // The merge may grow the base by up to the merged layers' data. Without that much room it would
  // stop halfway on ENOSPC; the chain is valid as it is, so leave the merge to a later stop.
  let mergedBytes = 0;
  for (const layer of merged) mergedBytes += (await fsp.stat(path.join(dir, layer))).blocks * 512;
  const space = hostSpaceOf(dir);
  if (space && space.freeBytes < mergedBytes + MERGE_HEADROOM_BYTES) {
    throw new Error(
      `not merged: ${Math.ceil(mergedBytes / MiB)} MiB to merge but ${Math.floor(space.freeBytes / MiB)} MiB free on ${space.mountPoint}; a later stop merges it`,
    );
  }
  const top = path.join(dir, layers.at(-1)!);
  const baseFile = path.join(dir, layers[base]!);
  if (base === layers.length - 2) await qemuImg.commitIntoBacking(top, options.signal);
  else await qemuImg.commitInto(top, baseFile, options.signal);
  await fsyncFile(baseFile);
  const current = { ...pointer, layers: layers.slice(0, base + 1), updatedAt: new Date().toISOString() };
  await writePointer(dir, current);
  for (const layer of merged) await fsp.rm(path.join(dir, layer), { force: true });
  await fsyncDir(dir);
  return current;
}
