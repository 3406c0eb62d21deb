// What a running QEMU costs the host: CPU time and resident memory from /proc, read through
// process-util's one reader of /proc/<pid>/stat. Reading /proc never touches the guest, so a
// dashboard polling this cannot wake or slow an instance; a stopped or suspended one has no QEMU.
import path from "node:path";
import { QEMU_PID_FILE } from "./filenames.js";
import { readJsonIfExists } from "./fs-util.js";
import { isAlive, readProcStat } from "./process-util.js";

/** Clock ticks a second in /proc's CPU times: USER_HZ, fixed at 100 by Linux's ABI on every architecture. */
const TICKS_PER_SECOND = 100;

/** One reading of a process's cost. */
export interface ProcessUsage {
  /** CPU time used since it started (user + kernel), in ms. */
  cpuMs: number;
  /** Resident memory, in bytes. */
  rssBytes: number;
  /** When it was read (`performance.now()`, in ms), to turn two readings into a CPU share. */
  at: number;
}

let pageSize: number | undefined;

/**
 * The kernel's page size in bytes. Node does not expose sysconf(_SC_PAGESIZE); this process's
 * resident size in bytes (Node) over the same in pages (/proc) gives it, rounded to a power of two
 * (4 KiB on x86_64, 4, 16 or 64 KiB on arm64).
 */
function pageSizeBytes(): number {
  if (pageSize !== undefined) return pageSize;
  const pages = readProcStat(process.pid)?.rssPages;
  const ratio = pages ? process.memoryUsage.rss() / pages : 4096;
  pageSize = 2 ** Math.round(Math.log2(ratio));
  return pageSize;
}

/** The cost of `pid` now, or `undefined` without /proc or such a process. */
export function processUsage(pid: number): ProcessUsage | undefined {
  const stat = readProcStat(pid);
  if (!stat || stat.state === "Z" || stat.state === "X") return undefined;
  return {
    cpuMs: (stat.cpuTicks * 1000) / TICKS_PER_SECOND,
    rssBytes: stat.rssPages * pageSizeBytes(),
    at: performance.now(),
  };
}

/**
 * The cost of the QEMU running the disk in `diskDir`, found by its pid record; `undefined` when
 * none runs (stopped, suspended) or the recorded pid now belongs to another process.
 */
export async function qemuUsage(diskDir: string): Promise<ProcessUsage | undefined> {
  const record = (await readJsonIfExists(path.join(diskDir, QEMU_PID_FILE)).catch(() => undefined)) as
    { pid?: unknown; startTime?: unknown } | undefined;
  if (typeof record?.pid !== "number") return undefined;
  const identity =
    typeof record.startTime === "string" ? { pid: record.pid, startTime: record.startTime } : { pid: record.pid };
  return isAlive(identity) ? processUsage(record.pid) : undefined;
}

/** CPU share between two readings of one process, in percent of one host CPU (two busy cores: 200). */
export function cpuPercent(before: ProcessUsage, after: ProcessUsage): number {
  const wallMs = after.at - before.at;
  if (wallMs <= 0) return 0;
  return Math.max(0, Math.round(((after.cpuMs - before.cpuMs) / wallMs) * 1000) / 10);
}
