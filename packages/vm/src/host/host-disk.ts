// The host file system under a disk: free space, its mount point, and the VM_HOST_DISK_FULL error.
import fs from "node:fs";
import path from "node:path";
import { VmError } from "../errors.js";

const MiB = 1024 ** 2;

/** Free and total bytes of the host file system holding `dir`, and where it is mounted. */
export interface HostSpace {
  /** Mount point of the file system (found by walking up to where the device changes). */
  mountPoint: string;
  /** Bytes an unprivileged writer can still use. */
  freeBytes: number;
  /** Size of the file system. */
  totalBytes: number;
}

/** The mount point of the file system holding `target` (its nearest existing ancestor). */
export function mountPointOf(target: string): string {
  let current = path.resolve(target);
  let stat = statOrUndefined(current);
  while (!stat && path.dirname(current) !== current) {
    current = path.dirname(current);
    stat = statOrUndefined(current);
  }
  if (!stat) return current;
  for (;;) {
    const parent = path.dirname(current);
    if (parent === current) return current;
    const parentStat = statOrUndefined(parent);
    if (!parentStat || parentStat.dev !== stat.dev) return current;
    current = parent;
  }
}

function statOrUndefined(file: string): fs.Stats | undefined {
  try {
    return fs.statSync(file);
  } catch {
    return undefined;
  }
}

/** Space on the host file system holding `dir`; undefined when it cannot be read. */
export function hostSpaceOf(dir: string): HostSpace | undefined {
  const mountPoint = mountPointOf(dir);
  try {
    const s = fs.statfsSync(mountPoint);
    return { mountPoint, freeBytes: s.bavail * s.bsize, totalBytes: s.blocks * s.bsize };
  } catch {
    return undefined;
  }
}

/** Whether an error (or one of its causes) is the host's "no space left on device". */
export function isNoSpaceError(error: unknown): boolean {
  for (let e = error, depth = 0; e !== undefined && e !== null && depth < 8; depth++) {
    const candidate = e as { code?: unknown; message?: unknown; cause?: unknown; details?: unknown };
    if (candidate.code === "ENOSPC" || candidate.code === "VM_HOST_DISK_FULL") return true;
    if (typeof candidate.message === "string" && /No space left on device|ENOSPC/i.test(candidate.message)) {
      return true;
    }
    const qemuOutput = (candidate.details as { qemuOutput?: unknown } | undefined)?.qemuOutput;
    if (typeof qemuOutput === "string" && /No space left on device/i.test(qemuOutput)) return true;
    e = candidate.cause;
  }
  return false;
}

function formatBytes(bytes: number): string {
  return bytes >= 10 * 1024 * MiB ? `${(bytes / 1024 ** 3).toFixed(1)} GiB` : `${(bytes / MiB).toFixed(1)} MiB`;
}

/** What was going on when the host file system turned out to be full. */
export type HostDiskFullSituation =
  /** QEMU paused the running guest on a failed disk write. */
  | "running"
  /** A stop could not flush or publish the run; it was discarded. */
  | "stop"
  /** A live checkpoint of the running VM could not create or publish its layers. */
  | "checkpoint"
  /** Opening or booting the disk needed space. */
  | "start"
  /** A disk operation (`action` names it), e.g. creating a layer. */
  | "disk";

/**
 * The VM_HOST_DISK_FULL error: names the host file system that is full (mount point, free space)
 * and the disk directory on it, says what happened to the guest's data and what to do next.
 */
export function hostDiskFullError(options: {
  dir: string;
  situation: HostDiskFullSituation;
  name?: string;
  /** For `disk`: what failed, e.g. "creating a disk layer". */
  action?: string;
  cause?: unknown;
  details?: Record<string, unknown>;
}): VmError {
  const { dir, situation, name } = options;
  const space = hostSpaceOf(dir);
  const mount = space?.mountPoint ?? dir;
  const free = space ? ` (${formatBytes(space.freeBytes)} free of ${formatBytes(space.totalBytes)})` : "";
  const where = `the host file system ${mount} is full${free}`;
  const vm = name ? `the VM ${name}` : `the VM of ${dir}`;
  let message: string;
  let hint: string;
  switch (situation) {
    case "running":
      message = `${where}, so QEMU paused ${vm} on a disk write; nothing it wrote is lost yet`;
      hint = `free space on ${mount}, then stop it (it resumes and saves its work if there is room again) and start it again`;
      break;
    case "stop":
      message = `the host file system ${mount} ran out of space${space ? ` (${formatBytes(space.freeBytes)} free now)` : ""}, so stopping ${vm} could not save its disk: work since the last checkpoint was dropped, and the previous checkpoint is still current`;
      hint = `free space on ${mount}, then start it again`;
      break;
    case "checkpoint":
      message = `${where}, so a live checkpoint of ${vm} could not be taken: the previous checkpoint is still current, and the guest's writes since then stay in its run`;
      hint = `free space on ${mount}; the next checkpoint or the stop saves them`;
      break;
    case "start":
      message = `${where}, and starting ${vm} needs some space for its disk in ${dir}`;
      hint = `free space on ${mount}, then start it again`;
      break;
    case "disk":
      message = `${where}, so ${options.action ?? "a disk operation"} in ${dir} failed`;
      hint = `free space on ${mount} and retry`;
      break;
  }
  return new VmError("VM_HOST_DISK_FULL", message, {
    hint,
    ...(options.cause !== undefined ? { cause: options.cause } : {}),
    details: {
      dir,
      ...(name ? { name } : {}),
      ...(space ? { mountPoint: space.mountPoint, freeBytes: space.freeBytes, totalBytes: space.totalBytes } : {}),
      ...options.details,
    },
  });
}
