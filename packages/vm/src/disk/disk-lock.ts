// The disk lock: one owner (pid, start time, purpose) per disk, taken atomically, a dead owner's
// lock taken over, and a QEMU that a dead owner left running reaped.
import { randomBytes } from "node:crypto";
import fsp from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { VmError, isVmError } from "../errors.js";
import { LOCK_FILE, QEMU_PID_FILE, lockTempName, staleLockName } from "../filenames.js";
import { readJsonIfExists } from "../fs-util.js";
import type { QemuPidRecord } from "../host/qemu-process.js";
import { isAlive, processCmdline, selfIdentity, waitFor, type ProcessIdentity } from "../process-util.js";

/** File name of the lock inside a disk directory. */

/** Contents of a lock file. */
export interface LockOwner extends ProcessIdentity {
  /** Why the lock is held ("run", "template", "destroy", ...). */
  purpose: string;
  /** Host name, for messages. */
  hostname: string;
  /** ISO time the lock was taken. */
  acquiredAt: string;
  /** Random token telling two holders in one process apart. */
  token: string;
}

/** A held disk lock. */
export interface DiskLock {
  /** The disk directory. */
  readonly dir: string;
  /** What was written into the lock file. */
  readonly owner: LockOwner;
  /** The previous owner when this acquisition took over a stale lock (its process had died). */
  readonly staleOwner: LockOwner | undefined;
  /** Deletes the lock file if it is still ours. Idempotent. */
  release(): Promise<void>;
}

async function readOwner(file: string): Promise<LockOwner | undefined> {
  try {
    return JSON.parse(await fsp.readFile(file, "utf8")) as LockOwner;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    // A torn or foreign lock file: treat as stale; the owner (if any) cannot be identified.
    return { pid: 0, purpose: "unknown", hostname: "", acquiredAt: "", token: "" };
  }
}

/**
 * Takes the exclusive lock of a disk directory. The lock is a JSON file created atomically with
 * `link()` (which fails if the name exists), naming the owning process by pid + start time, so a
 * lock whose owner died (SIGKILL, power loss) is recognised as stale and taken over. A live owner —
 * this process included — makes it fail with VM_DISK_BUSY.
 */
export async function acquireDiskLock(dir: string, purpose: string): Promise<DiskLock> {
  const file = path.join(dir, LOCK_FILE);
  const owner: LockOwner = {
    ...selfIdentity(),
    purpose,
    hostname: os.hostname(),
    acquiredAt: new Date().toISOString(),
    token: randomBytes(8).toString("hex"),
  };
  const temp = path.join(dir, lockTempName(owner.token));
  await fsp.writeFile(temp, JSON.stringify(owner), { mode: 0o600 });
  let staleOwner: LockOwner | undefined;
  try {
    for (let attempt = 0; attempt < 5; attempt += 1) {
      try {
        await fsp.link(temp, file);
        return makeLock(dir, file, owner, staleOwner);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      }
      const current = await readOwner(file);
      if (current === undefined) continue;
      if (current.pid > 0 && isAlive(current)) {
        const self = current.pid === process.pid;
        throw new VmError(
          "VM_DISK_BUSY",
          self
            ? `the disk in ${dir} is already open in this process (${current.purpose})`
            : `the disk in ${dir} is in use by process ${current.pid} (${current.purpose})`,
          {
            hint: self ? "stop or close that VM first" : "stop that VM first",
            details: { dir, ownerPid: current.pid, purpose: current.purpose },
          },
        );
      }
      // Stale: move it aside under a unique name, then make sure we moved the one we judged.
      const aside = path.join(dir, staleLockName(owner.token, attempt));
      try {
        await fsp.rename(file, aside);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "ENOENT") continue;
        throw error;
      }
      const moved = await readOwner(aside);
      if (moved && moved.token !== current.token) {
        // Another process replaced the stale lock between our read and rename: put it back.
        await fsp.link(aside, file).catch(() => undefined);
      } else {
        staleOwner = current;
      }
      await fsp.rm(aside, { force: true });
    }
    throw new VmError(
      "VM_DISK_BUSY",
      `could not take the lock of the disk in ${dir}; another process keeps taking it`,
      {
        details: { dir },
      },
    );
  } finally {
    await fsp.rm(temp, { force: true });
  }
}

function makeLock(dir: string, file: string, owner: LockOwner, staleOwner: LockOwner | undefined): DiskLock {
  let released = false;
  return {
    dir,
    owner,
    staleOwner,
    async release() {
      if (released) return;
      released = true;
      const current = await readOwner(file);
      if (current?.token === owner.token) await fsp.rm(file, { force: true });
    },
  };
}

/** Reads the lock of `dir` and tells whether its owner still runs. */
export async function inspectDiskLock(dir: string): Promise<{ owner: LockOwner; alive: boolean } | undefined> {
  const owner = await readOwner(path.join(dir, LOCK_FILE));
  if (!owner) return undefined;
  return { owner, alive: owner.pid > 0 && isAlive(owner) };
}

/** Lock purposes that last only a moment (no VM involved): worth waiting for rather than failing. */
const SHORT_PURPOSES = new Set(["clone", "template", "create", "destroy"]);

/**
 * Like {@link acquireDiskLock}, but waits up to `waitMs` while another process holds the disk for a
 * short operation (several instances created from one template at once take turns at the
 * template). A disk held by a running VM is never waited for.
 */
export async function acquireDiskLockWaiting(dir: string, purpose: string, waitMs: number): Promise<DiskLock> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      return await acquireDiskLock(dir, purpose);
    } catch (error) {
      const busyBriefly =
        isVmError(error, "VM_DISK_BUSY") && SHORT_PURPOSES.has(String(error.details.purpose)) && Date.now() < deadline;
      if (!busyBriefly) throw error;
      await new Promise((resolve) => setTimeout(resolve, 50 + Math.random() * 100));
    }
  }
}

/** What {@link reapStrayQemu} did. */
export interface ReapResult {
  /** Pid of the QEMU it killed, if any. */
  killedPid?: number;
  /** Why nothing was killed. */
  skipped?: "no-record" | "owner-alive" | "not-running" | "not-our-qemu";
}

/**
 * Kills a QEMU left behind by a dead owner of the disk in `dir`: reads the pid record, and only if
 * the lock owner is gone, the pid is still the same process, and its command line is a QEMU using a
 * file in `dir`, sends SIGKILL and waits for it to go. Safe to call any time.
 */
export async function reapStrayQemu(dir: string): Promise<ReapResult> {
  const file = path.join(dir, QEMU_PID_FILE);
  const record = (await readJsonIfExists(file).catch(() => undefined)) as QemuPidRecord | undefined;
  if (!record || typeof record.pid !== "number") return { skipped: "no-record" };
  const lock = await inspectDiskLock(dir);
  if (lock?.alive && lock.owner.pid === record.ownerPid) return { skipped: "owner-alive" };
  if (!isAlive(record)) {
    await fsp.rm(file, { force: true });
    return { skipped: "not-running" };
  }
  const cmdline = processCmdline(record.pid);
  const resolvedDir = path.resolve(dir);
  const looksLikeOurs =
    cmdline !== undefined &&
    cmdline.some((arg) => /qemu-system-/.test(arg)) &&
    cmdline.some((arg) => arg.includes(`${resolvedDir}${path.sep}`));
  if (!looksLikeOurs) {
    await fsp.rm(file, { force: true });
    return { skipped: "not-our-qemu" };
  }
  try {
    process.kill(record.pid, "SIGKILL");
  } catch {
    // already gone
  }
  const gone = await waitFor(() => !isAlive(record), 10_000);
  if (!gone) {
    throw new VmError(
      "VM_DISK_BUSY",
      `a leftover QEMU (pid ${record.pid}) still uses the disk in ${dir} and did not die on SIGKILL`,
      { hint: "kill it by hand", details: { dir, pid: record.pid } },
    );
  }
  await fsp.rm(file, { force: true });
  return { killedPid: record.pid };
}
