// The work of `upload` and `download` (`pi-sandbox cp`), run in the daemon: host files and
// directories into the guest and back, file by file over the supervisor's checked transfers (each
// sha256-verified, at most 256 MiB), directories recursively. `cp -r` rules: into an existing
// directory a source keeps its name; otherwise the target is the copy.
//
// Guest names are untrusted: the supervisor accepts only plain relative names listed after their
// directory, and on the host every directory on the way is checked to be a real directory (not a
// link that would lead the copy elsewhere). Links and special files are skipped in both directions.

import { createHash, randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { chmod, lstat, mkdir, open, readdir, rename, stat, unlink } from "node:fs/promises";
import { basename, dirname, join, posix } from "node:path";
import type { GuestFiles, GuestStat } from "@pi-sandbox/supervisor";
import { ControllerError } from "../errors.js";
import type { ProgressEvent } from "../wire.js";

/** Largest file one copy moves (the supervisor's transfer limit). */
export const COPY_FILE_MAX_BYTES = 256 * 1024 * 1024;
/** Most entries of one copied directory tree. */
export const COPY_MAX_ENTRIES = 20_000;
/** At most this many skipped entries are named in a result. */
const SKIPPED_LISTED = 20;
/** Progress ticks at most this often, in ms. */
const TICK_MS = 200;

/** What a copy did. */
export interface CopyResult {
  /** Instance name. */
  name: string;
  /** `upload`: host to guest; `download`: guest to host. */
  direction: "upload" | "download";
  /** Absolute destination path (guest for upload, host for download). */
  to: string;
  /** Files copied. */
  files: number;
  /** Directories created or reused. */
  directories: number;
  /** Bytes copied. */
  bytes: number;
  /** sha256 of the file, when exactly one file was copied (verified on arrival). */
  sha256?: string;
  /** Links and special files left out (the first 20), paths relative to their source. */
  skipped: { path: string; type: string }[];
  /** How many were left out in all. */
  skippedCount: number;
}

type Kind = "file" | "directory" | "symlink" | "other";

/** How a copy runs. */
export interface CopyOptions {
  /** The target was written with a trailing `/`: it must be an existing directory. */
  intoDirectory: boolean;
  /** Byte progress (`stage` "copy"). */
  progress: (event: ProgressEvent) => void;
  /** Ends the copy between chunks; the file in flight is discarded. */
  signal?: AbortSignal;
}

/** One step of a copy: make a directory or copy a file (sizes are for progress only). */
interface Step {
  kind: "directory" | "file";
  from: string;
  to: string;
  size: number;
  mode: number;
  label: string;
}

interface Plan {
  steps: Step[];
  skipped: { path: string; type: string }[];
}

function copyError(message: string, hint: string, details?: Record<string, unknown>): ControllerError {
  return new ControllerError("CONTROLLER_BAD_INPUT", message, { hint, details });
}

/** Ticks progress with bytes done of the total, at most every 200 ms (and at the end). */
function ticker(progress: (event: ProgressEvent) => void, total: number) {
  let last = 0;
  let done = 0;
  return {
    add(bytes: number, label: string, force = false) {
      done += bytes;
      const now = Date.now();
      if (!force && now - last < TICK_MS) return;
      last = now;
      progress({ stage: "copy", message: label, done, total });
    },
  };
}

function kindOfHost(st: Awaited<ReturnType<typeof lstat>>): Kind {
  if (st.isFile()) return "file";
  if (st.isDirectory()) return "directory";
  if (st.isSymbolicLink()) return "symlink";
  return "other";
}

/** A guest path: absolute, or relative to the workspace. */
export function guestPath(workspace: string, path: string): string {
  return posix.resolve(workspace, path);
}

/** Where each source goes: into `to` when it is a directory, else `to` itself (one source only). */
function targets(sources: readonly string[], to: string, toIsDir: boolean, join2: (a: string, b: string) => string) {
  if (!toIsDir && sources.length > 1) {
    throw copyError(
      `cannot copy ${sources.length} sources to ${to}: it is not an existing directory`,
      "Name an existing directory as the target of several sources.",
      { to },
    );
  }
  return sources.map((source) => (toIsDir ? join2(to, basename(source.replace(/\/+$/, "")) || source) : to));
}

// -- host to guest

async function planUpload(from: string, to: string, skipped: Plan["skipped"]): Promise<Step[]> {
  const top = await stat(from).catch((error: NodeJS.ErrnoException) => {
    throw copyError(
      `cannot copy ${from}: ${error.code === "ENOENT" ? "no such file or directory" : error.message}`,
      "Check the host path.",
    );
  });
  if (top.isFile()) return [{ kind: "file", from, to, size: top.size, mode: top.mode & 0o7777, label: basename(from) }];
  if (!top.isDirectory())
    throw copyError(`cannot copy ${from}: not a file or directory`, "Copy regular files and directories.");
  const steps: Step[] = [{ kind: "directory", from, to, size: 0, mode: top.mode & 0o7777, label: basename(from) }];
  const walk = async (dir: string, rel: string): Promise<void> => {
    const names = (await readdir(dir)).sort();
    for (const entry of names) {
      const path = rel ? `${rel}/${entry}` : entry;
      const full = join(dir, entry);
      const st = await lstat(full);
      const kind = kindOfHost(st);
      if (steps.length >= COPY_MAX_ENTRIES) {
        throw copyError(`${from} has more than ${COPY_MAX_ENTRIES} entries`, "Copy an archive of it (tar) instead.");
      }
      const target = posix.join(to, path);
      if (kind === "directory") {
        steps.push({ kind, from: full, to: target, size: 0, mode: st.mode & 0o7777, label: path });
        await walk(full, path);
      } else if (kind === "file") {
        steps.push({ kind, from: full, to: target, size: st.size, mode: st.mode & 0o7777, label: path });
      } else skipped.push({ path, type: kind });
    }
  };
  await walk(from, "");
  return steps;
}

async function sha256OfFile(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

async function uploadFile(
  files: GuestFiles,
  step: Step,
  tick: ReturnType<typeof ticker>,
  signal: AbortSignal | undefined,
): Promise<{ bytes: number; sha256: string }> {
  const handle = await open(step.from, "r");
  try {
    const { size } = await handle.stat();
    if (size > COPY_FILE_MAX_BYTES) {
      throw copyError(`${step.from} is ${size} bytes, more than the ${COPY_FILE_MAX_BYTES} a copy moves`, "Split it.");
    }
    const sum = await sha256OfFile(step.from);
    let sent = 0;
    const written = await files.writeFrom(
      step.to,
      {
        size,
        sha256: sum,
        read: async (offset, length) => {
          const buffer = Buffer.alloc(length);
          const { bytesRead } = await handle.read(buffer, 0, length, offset);
          return buffer.subarray(0, bytesRead);
        },
        onProgress: (done) => {
          tick.add(done - sent, step.label);
          sent = done;
        },
      },
      { mode: step.mode & 0o777, signal },
    );
    return { bytes: written.sizeBytes, sha256: written.sha256 };
  } finally {
    await handle.close();
  }
}

/** Copies host `sources` (absolute) to guest path `to` (absolute). */
export async function upload(
  files: GuestFiles,
  name: string,
  sources: readonly string[],
  to: string,
  options: CopyOptions,
): Promise<CopyResult> {
  const { signal } = options;
  const dest = await files.stat(to, { signal }).catch((error: { code?: string }) => {
    if (error.code === "FILE_NOT_FOUND") return undefined;
    throw error;
  });
  const toIsDir = isGuestDir(dest) || (options.intoDirectory ? missingDir(to) : false);
  const plan: Plan = { steps: [], skipped: [] };
  for (const [i, target] of targets(sources, to, toIsDir, posix.join).entries()) {
    plan.steps.push(...(await planUpload(sources[i]!, target, plan.skipped)));
  }
  return runPlan(name, "upload", to, plan, options, {
    directory: (step) => files.mkdir(step.to, { mode: step.mode & 0o777, signal }),
    file: (step, tick) => uploadFile(files, step, tick, signal),
  });
}

function isGuestDir(st: GuestStat | undefined): boolean {
  return st?.type === "directory" || (st?.type === "symlink" && st.target === "directory");
}

function missingDir(to: string): never {
  throw copyError(`${to} does not exist`, "Create the directory first, or name the target without a trailing /.", {
    to,
  });
}

function emptyResult(name: string, direction: CopyResult["direction"], to: string, plan: Plan): CopyResult {
  return {
    name,
    direction,
    to,
    files: 0,
    directories: 0,
    bytes: 0,
    sha256: undefined,
    skipped: plan.skipped.slice(0, SKIPPED_LISTED),
    skippedCount: plan.skipped.length,
  };
}

// -- guest to host

async function planDownload(
  files: GuestFiles,
  from: string,
  to: string,
  skipped: Plan["skipped"],
  signal: AbortSignal | undefined,
): Promise<Step[]> {
  const top = await files.stat(from, { signal });
  const kind = top.type === "symlink" ? top.target : top.type;
  const label = posix.basename(from);
  if (kind === "file") return [{ kind, from, to, size: Math.min(top.size, COPY_FILE_MAX_BYTES), mode: 0o644, label }];
  if (kind !== "directory")
    throw copyError(`cannot copy ${from}: not a file or directory`, "Copy regular files and directories.");
  const tree = await files.list(from, { maxEntries: COPY_MAX_ENTRIES, signal });
  if (tree.truncated) {
    throw copyError(`${from} has more than ${COPY_MAX_ENTRIES} entries`, "Copy an archive of it (tar) instead.");
  }
  const steps: Step[] = [{ kind: "directory", from, to, size: 0, mode: top.mode, label }];
  for (const entry of tree.entries) {
    const target = join(to, ...entry.path.split("/"));
    const source = posix.join(from, entry.path);
    if (entry.type === "directory")
      steps.push({ kind: "directory", from: source, to: target, size: 0, mode: entry.mode, label: entry.path });
    else if (entry.type === "file") {
      steps.push({
        kind: "file",
        from: source,
        to: target,
        size: Math.min(entry.size, COPY_FILE_MAX_BYTES),
        mode: entry.mode,
        label: entry.path,
      });
    } else skipped.push({ path: entry.path, type: entry.type });
  }
  if (tree.skippedNames > 0) skipped.push({ path: `(${tree.skippedNames} names that are not UTF-8)`, type: "other" });
  return steps;
}

/** A host directory the copy may write into: a real directory, created if missing. */
async function hostDirectory(path: string, mode: number): Promise<void> {
  try {
    await mkdir(path, { mode: (mode & 0o755) | 0o700 });
    return;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
  const st = await lstat(path);
  if (!st.isDirectory()) {
    throw copyError(`cannot copy into ${path}: it exists and is not a directory`, "Remove it or pick another target.", {
      path,
    });
  }
}

async function downloadFile(
  files: GuestFiles,
  step: Step,
  tick: ReturnType<typeof ticker>,
  signal: AbortSignal | undefined,
): Promise<{ bytes: number; sha256: string }> {
  const existing = await lstat(step.to).catch(() => undefined);
  if (existing?.isDirectory()) {
    throw copyError(
      `cannot copy ${step.from} to ${step.to}: it is a directory`,
      "Name a file path, or copy into the directory.",
    );
  }
  const tmp = join(dirname(step.to), `.${basename(step.to)}.pi-sandbox-${randomBytes(6).toString("hex")}.part`);
  const handle = await open(tmp, "wx", 0o600);
  let kept = false;
  try {
    let done = 0;
    const read = await files.readTo(
      step.from,
      {
        write: async (piece) => {
          await handle.write(piece);
        },
        onProgress: (received) => {
          tick.add(received - done, step.label);
          done = received;
        },
      },
      { maxBytes: COPY_FILE_MAX_BYTES, signal },
    );
    await handle.sync();
    await handle.close();
    // Guest modes are untrusted: permission bits only, never group/other write.
    await chmod(tmp, (step.mode & 0o755) | 0o600);
    await rename(tmp, step.to);
    kept = true;
    return { bytes: read.size, sha256: read.sha256 };
  } finally {
    if (!kept) {
      await handle.close().catch(() => undefined);
      await unlink(tmp).catch(() => undefined);
    }
  }
}

/** Copies guest `sources` (absolute) to host path `to` (absolute). */
export async function download(
  files: GuestFiles,
  name: string,
  sources: readonly string[],
  to: string,
  options: CopyOptions,
): Promise<CopyResult> {
  const { signal } = options;
  const dest = await stat(to).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return undefined;
    throw error;
  });
  const toIsDir = dest?.isDirectory() === true || (options.intoDirectory ? missingDir(to) : false);
  const plan: Plan = { steps: [], skipped: [] };
  for (const [i, target] of targets(sources, to, toIsDir, join).entries()) {
    plan.steps.push(...(await planDownload(files, sources[i]!, target, plan.skipped, signal)));
  }
  return runPlan(name, "download", to, plan, options, {
    directory: (step) => hostDirectory(step.to, step.mode),
    file: (step, tick) => downloadFile(files, step, tick, signal),
  });
}

/** Runs a planned copy in order: directories before what they hold, progress by bytes. */
async function runPlan(
  name: string,
  direction: CopyResult["direction"],
  to: string,
  plan: Plan,
  { progress, signal }: CopyOptions,
  copy: {
    directory: (step: Step) => Promise<unknown>;
    file: (step: Step, tick: ReturnType<typeof ticker>) => Promise<{ bytes: number; sha256: string }>;
  },
): Promise<CopyResult> {
  const total = plan.steps.reduce((sum, step) => sum + step.size, 0);
  const tick = ticker(progress, total);
  const result = emptyResult(name, direction, to, plan);
  for (const step of plan.steps) {
    signal?.throwIfAborted();
    if (step.kind === "directory") {
      await copy.directory(step);
      result.directories++;
    } else {
      const copied = await copy.file(step, tick);
      result.files++;
      result.bytes += copied.bytes;
      result.sha256 = copied.sha256;
    }
  }
  tick.add(0, "done", true);
  if (result.files !== 1) delete result.sha256;
  return result;
}
