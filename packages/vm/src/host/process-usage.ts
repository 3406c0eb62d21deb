// What a running QEMU costs the host: CPU time and resident memory from /proc, read through
// process-util's one reader of /proc/<pid>/stat. Reading /proc never touches the guest, so a
// dashboard polling this cannot wake or slow an instance; a stopped or suspended one has no QEMU.
import fsp from "node:fs/promises";
import path from "node:path";
import { QEMU_PID_FILE } from "../filenames.js";
import { readJsonIfExists } from "../fs-util.js";
import { isAlive, readProcStat } from "../process-util.js";

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
  const pid = await runningQemuPid(diskDir);
  return pid === undefined ? undefined : processUsage(pid);
}

/** Where a running QEMU's resident memory is, in bytes (see {@link qemuResidentMemory}). */
export interface QemuResidentMemory {
  /** In the guest's RAM: what the guest has touched and not given back (its balloon returns freed blocks). */
  guestBytes: number;
  /**
   * In TCG's translation cache: host code made from the guest code that ran so far. QEMU keeps it
   * (up to 1 GiB) for as long as it runs; KVM and HVF have none.
   */
  translationCacheBytes: number;
  /** The rest: QEMU's own code, heap and device state. */
  otherBytes: number;
}

/**
 * Where the resident memory of the QEMU running the disk in `diskDir` is, read from its
 * /proc/<pid>/smaps (which the kernel builds by walking the process's page tables: a few ms for a
 * QEMU, so one-off reports use it, not polling); `undefined` when none runs or /proc cannot tell.
 */
export async function qemuResidentMemory(diskDir: string): Promise<QemuResidentMemory | undefined> {
  const pid = await runningQemuPid(diskDir);
  if (pid === undefined) return undefined;
  const text = await fsp.readFile(`/proc/${pid}/smaps`, "utf8").catch(() => undefined);
  return text === undefined ? undefined : residentMemoryOf(text);
}

/**
 * Sorts a QEMU's mappings (its smaps text) into guest RAM, the translation cache and the rest. The
 * guest's RAM is QEMU's largest anonymous mapping that is not executable (one allocation the size
 * of the guest's memory, larger than anything else QEMU maps); the translation cache is anonymous
 * memory QEMU maps executable (TCG's code buffer; with split W^X its executable view of a memfd).
 * `undefined` for text with no mappings.
 */
export function residentMemoryOf(smaps: string): QemuResidentMemory | undefined {
  const mappings: { sizeBytes: number; rssBytes: number; anonymous: boolean; executable: boolean }[] = [];
  for (const line of smaps.split("\n")) {
    const header = /^([0-9a-f]+)-([0-9a-f]+) ([-rwxps]{4}) \S+ \S+ (\d+)\s*(.*)$/.exec(line);
    if (header) {
      const [, start, end, perms, inode, name] = header as unknown as [string, string, string, string, string, string];
      // memfd mappings have an inode, but no file behind them either.
      const anonymous = name.startsWith("/memfd:") || (inode === "0" && (name === "" || name.startsWith("[anon:")));
      const sizeBytes = Number.parseInt(end, 16) - Number.parseInt(start, 16);
      mappings.push({ sizeBytes, rssBytes: 0, anonymous, executable: perms[2] === "x" });
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB$/.exec(line);
    const last = mappings.at(-1);
    if (rss && last) last.rssBytes = Number(rss[1]) * 1024;
  }
  if (mappings.length === 0) return undefined;
  const total = mappings.reduce((sum, m) => sum + m.rssBytes, 0);
  const ram = mappings
    .filter((m) => m.anonymous && !m.executable)
    .reduce<(typeof mappings)[number] | undefined>(
      (big, m) => (big && big.sizeBytes >= m.sizeBytes ? big : m),
      undefined,
    );
  const guestBytes = ram?.rssBytes ?? 0;
  const translationCacheBytes = mappings
    .filter((m) => m.anonymous && m.executable)
    .reduce((sum, m) => sum + m.rssBytes, 0);
  return { guestBytes, translationCacheBytes, otherBytes: total - guestBytes - translationCacheBytes };
}

/** The pid of the QEMU running the disk in `diskDir` (its pid record, checked against reuse). */
async function runningQemuPid(diskDir: string): Promise<number | undefined> {
  const record = (await readJsonIfExists(path.join(diskDir, QEMU_PID_FILE)).catch(() => undefined)) as
    { pid?: unknown; startTime?: unknown } | undefined;
  if (typeof record?.pid !== "number") return undefined;
  const identity =
    typeof record.startTime === "string" ? { pid: record.pid, startTime: record.startTime } : { pid: record.pid };
  return isAlive(identity) ? record.pid : undefined;
}

/** CPU share between two readings of one process, in percent of one host CPU (two busy cores: 200). */
export function cpuPercent(before: ProcessUsage, after: ProcessUsage): number {
  const wallMs = after.at - before.at;
  if (wallMs <= 0) return 0;
  return Math.max(0, Math.round(((after.cpuMs - before.cpuMs) / wallMs) * 1000) / 10);
}
