// One refresh per instance at a time: an exclusive lock file on the host, next to the controller's
// state. A second refresh fails fast with REVIEW_SETUP_BUSY naming the holder; a lock left by a
// refresh that died (its pid is gone on this host) is taken over.
import { randomUUID } from "node:crypto";
import { mkdir, open, readFile, stat, unlink } from "node:fs/promises";
import { hostname as osHostname } from "node:os";
import { dirname, join } from "node:path";
import { resolveStateRoot } from "@pi-sandbox/controller/client";
import { ReviewSetupError } from "./errors.js";

/** What the lock file records about the refresh holding it. */
export interface RefreshLockHolder {
  /** Instance being refreshed. */
  instance: string;
  /** Host process id of the refresh. */
  pid: number;
  /** Host name, so a pid is only judged on the host that wrote it. */
  hostname: string;
  /** ISO time the refresh took the lock. */
  startedAt: string;
  /** Checkout being snapshotted. */
  repo: string;
  /** Unique per acquisition; release and takeover only remove the file that holds their token. */
  token: string;
}

/** Seams for tests: this process's identity and the liveness check. */
export interface RefreshLockSeams {
  pid?: number;
  hostname?: string;
  isAlive?: (pid: number) => boolean;
}

/** A lock file that cannot be parsed this long after it was written is taken for a dead writer's. */
const UNREADABLE_GRACE_MS = 10_000;

/** `<state root>/review-setup`. */
export function defaultLockDir(env: NodeJS.ProcessEnv): string {
  return join(resolveStateRoot(env), "review-setup");
}

/** `<dir>/<instance>.lock`. */
export function refreshLockPath(dir: string, instance: string): string {
  return join(dir, `${instance}.lock`);
}

function processIsAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

type Observed =
  { kind: "gone" } | { kind: "holder"; holder: RefreshLockHolder } | { kind: "unreadable"; ageMs: number };

async function observe(file: string, now: number): Promise<Observed> {
  try {
    const [text, info] = await Promise.all([readFile(file, "utf8"), stat(file)]);
    try {
      const holder = JSON.parse(text) as RefreshLockHolder;
      if (typeof holder.pid === "number" && typeof holder.token === "string") return { kind: "holder", holder };
    } catch {
      // Being written right now, or truncated by a crash: decided by its age below.
    }
    return { kind: "unreadable", ageMs: now - info.mtimeMs };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return { kind: "gone" };
    throw error;
  }
}

async function unlinkIfPresent(file: string): Promise<void> {
  await unlink(file).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== "ENOENT") throw error;
  });
}

/**
 * Removes a dead holder's lock under a short-lived guard file, after checking that the lock still
 * holds the dead holder's token (another refresh may have taken it over in the meantime).
 */
async function takeOver(file: string, dead: RefreshLockHolder | undefined): Promise<void> {
  const guard = `${file}.takeover`;
  let handle;
  try {
    handle = await open(guard, "wx", 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    // A guard older than a few seconds belongs to a takeover that died; clear it for the next try.
    const age = Date.now() - (await stat(guard).catch(() => ({ mtimeMs: Date.now() }))).mtimeMs;
    if (age > UNREADABLE_GRACE_MS) await unlinkIfPresent(guard);
    return;
  }
  try {
    await handle.close();
    const now = await observe(file, Date.now());
    const same =
      dead === undefined ? now.kind === "unreadable" : now.kind === "holder" && now.holder.token === dead.token;
    if (same) await unlinkIfPresent(file);
  } finally {
    await unlinkIfPresent(guard);
  }
}

/**
 * Takes the refresh lock of an instance or throws REVIEW_SETUP_BUSY naming the refresh that holds
 * it. Resolves with the release function (idempotent; removes only this acquisition's file).
 */
export async function acquireRefreshLock(
  file: string,
  info: { instance: string; repo: string; now: number },
  seams: RefreshLockSeams = {},
): Promise<() => Promise<void>> {
  const self: RefreshLockHolder = {
    instance: info.instance,
    pid: seams.pid ?? process.pid,
    hostname: seams.hostname ?? osHostname(),
    startedAt: new Date(info.now).toISOString(),
    repo: info.repo,
    token: randomUUID(),
  };
  const isAlive = seams.isAlive ?? processIsAlive;
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  let last: Observed = { kind: "gone" };
  for (let attempt = 0; attempt < 3; attempt += 1) {
    try {
      const handle = await open(file, "wx", 0o600);
      try {
        await handle.writeFile(`${JSON.stringify(self)}\n`);
      } finally {
        await handle.close();
      }
      let released = false;
      return async () => {
        if (released) return;
        released = true;
        const current = await observe(file, Date.now()).catch(() => ({ kind: "gone" }) as const);
        if (current.kind === "holder" && current.holder.token === self.token) await unlinkIfPresent(file);
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    last = await observe(file, Date.now());
    if (last.kind === "gone") continue;
    if (last.kind === "unreadable") {
      if (last.ageMs <= UNREADABLE_GRACE_MS) break;
      await takeOver(file, undefined);
      continue;
    }
    const dead = last.holder.hostname === self.hostname && !isAlive(last.holder.pid);
    if (!dead) break;
    await takeOver(file, last.holder);
  }
  throw busyError(file, info.instance, last);
}

function busyError(file: string, instance: string, seen: Observed): ReviewSetupError {
  const holder = seen.kind === "holder" ? seen.holder : undefined;
  const who = holder
    ? `pid ${holder.pid} on ${holder.hostname}, started ${holder.startedAt}, snapshotting ${holder.repo}`
    : "a refresh that is just starting";
  return new ReviewSetupError("REVIEW_SETUP_BUSY", `instance ${instance} is already being refreshed by ${who}`, {
    hint: `Wait for that refresh to finish and rerun. If no refresh is running (e.g. it was killed on another host), delete ${file}.`,
    details: {
      lockPath: file,
      holder: holder && { pid: holder.pid, hostname: holder.hostname, startedAt: holder.startedAt, repo: holder.repo },
    },
  });
}
