import fs from "node:fs";

/** A process identity that survives pid reuse: pid plus the kernel's start time (Linux). */
export interface ProcessIdentity {
  /** Process id. */
  pid: number;
  /** Start time in clock ticks since boot (`/proc/<pid>/stat` field 22); absent off Linux. */
  startTime?: string;
}

/** Start time of `pid` from `/proc`, or `undefined` when unavailable. */
export function processStartTime(pid: number): string | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return rest[19];
  } catch {
    return undefined;
  }
}

/** This process's identity. */
export function selfIdentity(): ProcessIdentity {
  const startTime = processStartTime(process.pid);
  return startTime === undefined ? { pid: process.pid } : { pid: process.pid, startTime };
}

/** Whether a process with this identity is still running (a reused pid does not count). */
export function isAlive(identity: ProcessIdentity): boolean {
  try {
    process.kill(identity.pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  if (identity.startTime === undefined) return true;
  const now = processStartTime(identity.pid);
  // Zombies and /proc-less hosts report nothing: trust kill(0) then.
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
