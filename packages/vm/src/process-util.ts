// Processes by pid: the one reader of /proc/<pid>/stat (state, parent, start time), liveness that
// never counts a zombie, and identities that survive pid reuse.
import fs from "node:fs";

/** A process identity that survives pid reuse: pid plus the kernel's start time (Linux). */
export interface ProcessIdentity {
  /** Process id. */
  pid: number;
  /** Start time in clock ticks since boot (`/proc/<pid>/stat` field 22); absent off Linux. */
  startTime?: string;
}

/** What `/proc/<pid>/stat` says of a process (Linux). */
export interface ProcStat {
  /** Field 3: `R`, `S`, `D`, ... ; `Z` for a zombie (exited, not yet reaped), `X` for dead. */
  state: string;
  /** Field 4: the parent's pid. */
  ppid: number;
  /** Field 22: start time in clock ticks since boot. */
  startTime: string;
  /** Fields 14 and 15: CPU time spent in user and kernel mode, in clock ticks (USER_HZ, 100 a second). */
  cpuTicks: number;
  /** Field 24: resident set size, in pages. */
  rssPages: number;
}

/** `/proc/<pid>/stat` of `pid`, or `undefined` when there is none (no such process, no /proc). */
export function readProcStat(pid: number): ProcStat | undefined {
  let stat: string;
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  if (rest.length < 22) return undefined;
  return {
    state: rest[0]!,
    ppid: Number(rest[1]),
    startTime: rest[19]!,
    cpuTicks: Number(rest[11]) + Number(rest[12]),
    rssPages: Number(rest[21]),
  };
}

/** Start time of `pid` from `/proc`, or `undefined` when unavailable. */
export function processStartTime(pid: number): string | undefined {
  return readProcStat(pid)?.startTime;
}

/**
 * True when a process with this pid exists (we may signal it, or it is another user's) and is not
 * a zombie: a process that exited but whose parent has not reaped it yet is gone all the same.
 * Without /proc (macOS) kill(0) alone decides.
 */
export function pidAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  const state = readProcStat(pid)?.state;
  return state !== "Z" && state !== "X";
}

/** This process's identity. */
export function selfIdentity(): ProcessIdentity {
  const startTime = processStartTime(process.pid);
  return startTime === undefined ? { pid: process.pid } : { pid: process.pid, startTime };
}

/** Whether a process with this identity is still running (a reused pid does not count). */
export function isAlive(identity: ProcessIdentity): boolean {
  if (!pidAlive(identity.pid)) return false;
  if (identity.startTime === undefined) return true;
  const now = processStartTime(identity.pid);
  // /proc-less hosts report nothing: trust kill(0) then.
  return now === undefined || now === identity.startTime;
}

/** The command line of `pid` as an argv list (Linux), or `undefined`. */
export function processCmdline(pid: number): string[] | undefined {
  try {
    const raw = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8");
    return raw.split("\0").filter((part) => part !== "");
  } catch {
    return undefined;
  }
}

/** Waits until `check()` is true or `timeoutMs` passes; resolves to the last result. */
export async function waitFor(check: () => boolean, timeoutMs: number, intervalMs = 50): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (check()) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
