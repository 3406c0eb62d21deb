// Disks made from other disks by hard links, never by copying data: a template from a stopped or
// suspended instance, an instance from a template, and a fork of an instance. The store's methods
// (disk-store.ts) run these and report the new disk.
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { VmError } from "../errors.js";
import { fsyncFile } from "../fs-util.js";
import { checkDiskSize } from "../host/host-facts.js";
import { verifyRecordedImage } from "../image/image.js";
import { acquireDiskLock, acquireDiskLockWaiting, type DiskLock } from "./disk-lock.js";
import {
  GiB,
  diskBytesOf,
  linkLayers,
  readPointer,
  removeOrphans,
  removeRunRecord,
  requireDir,
  requirePointer,
  writePointer,
  type DiskPointer,
} from "./disk-layout.js";
import { newLayerName } from "../filenames.js";
import type { QemuImg } from "./qemu-img.js";
import { keptDir, requireKept } from "./kept-checkpoints.js";
import { linkSuspendState, removeSuspendState, settleSuspendState } from "./vm-memory.js";

/**
 * Makes an immutable template from a stopped or suspended instance: its layers are hard-linked
 * (O(1), no copy), so the template and the instance share them; from then on neither writes into
 * them. A suspended instance's saved memory is linked too: instances made from the template then
 * resume it instead of booting.
 */
export async function createTemplate(
  sourceDir: string,
  templateDir: string,
  options: { signal?: AbortSignal } = {},
): Promise<void> {
  const sourceLock = await acquireDiskLock(await requireDir(sourceDir), "template");
  try {
    const source = await requirePointer(sourceDir);
    await requireLayers(sourceDir, source);
    await settleSuspendState(sourceDir, source.generation);
    const lock = await prepareNewDir(templateDir, "create-template");
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
}

/**
 * Creates an instance from a template by hard-linking the template's immutable layers: time and
 * space do not depend on the template's size, and removing the template later only drops its own
 * links. `diskGiB` larger than the template's size adds a layer with the bigger virtual size.
 * A template with saved memory gives the instance a link to it (its first start resumes the
 * template's guest), except with a larger disk, which the saved guest would not know.
 */
export async function createFromTemplate(
  qemuImg: QemuImg,
  imageChecks: { stateRoot?: string },
  templateDir: string,
  dir: string,
  options: { diskGiB?: number; signal?: AbortSignal } = {},
): Promise<void> {
  const templateLock = await acquireDiskLockWaiting(await requireDir(templateDir), "clone", 60_000);
  try {
    const template = await requirePointer(templateDir);
    if (template.kind !== "template") {
      throw new VmError("VM_DISK_FAILED", `${templateDir} holds an instance disk, not a template`, {
        details: { dir: templateDir },
      });
    }
    await requireLayers(templateDir, template);
    await verifyRecordedImage(template.image, imageChecks);
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
    const lock = await prepareNewDir(dir, "create");
    try {
      await linkLayers(templateDir, dir, template.layers, options.signal);
      const layers = [...template.layers];
      let grown = template.grown;
      if (sizeBytes > template.sizeBytes) {
        const layer = newLayerName();
        await qemuImg.createOverlay(path.join(dir, layer), layers.at(-1)!, "qcow2", sizeBytes, options.signal);
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
}

/**
 * A new instance disk in `dir` that shares every layer of the instance disk in `sourceDir` (hard
 * links: O(1) in the disk's size) and its saved memory, if it has one for its current checkpoint:
 * the fork's first boot resumes it. Neither disk writes the shared layers again (a layer with
 * more than one link is never merged into). The source must not run (VM_DISK_BUSY), unless the
 * fork is of its kept checkpoint `checkpoint`: then its layers (and memory, if kept) are the
 * checkpoint's, which never change, and the source may run meanwhile.
 */
export async function forkDisk(
  sourceDir: string,
  dir: string,
  options: { signal?: AbortSignal; checkpoint?: string } = {},
): Promise<void> {
  await requireDir(sourceDir);
  const sourceLock = options.checkpoint === undefined ? await acquireDiskLock(sourceDir, "fork") : undefined;
  try {
    const kept = options.checkpoint === undefined ? undefined : await requireKept(sourceDir, options.checkpoint);
    const from = kept ? keptDir(sourceDir, kept.id) : sourceDir;
    const source = await requirePointer(from);
    if (source.kind !== "instance") {
      throw new VmError("VM_DISK_FAILED", `${sourceDir} holds a template; make an instance from it instead`, {
        details: { dir: sourceDir },
      });
    }
    await requireLayers(from, source);
    if (!kept) await settleSuspendState(from, source.generation);
    const lock = await prepareNewDir(dir, "fork");
    try {
      await linkLayers(from, dir, source.layers, options.signal);
      if (!kept || kept.memory) await linkSuspendState(from, dir, kept?.generation ?? source.generation, 0);
      await writePointer(dir, { ...source, generation: 0, updatedAt: new Date().toISOString() });
    } finally {
      await lock.release();
    }
  } finally {
    await sourceLock?.release();
  }
}

/** Fails with VM_DISK_CORRUPT when a layer the pointer names is missing or unreadable. */
export async function requireLayers(dir: string, pointer: DiskPointer): Promise<void> {
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
export async function prepareNewDir(dir: string, purpose: string): Promise<DiskLock> {
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
