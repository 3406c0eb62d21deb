// The work of `upload` and `download` (`pi-sandbox cp`), run in the daemon: host files and
// directories into the guest and back, file by file over the supervisor's checked transfers (each
// verified, at most 256 MiB), directories recursively. `cp -r` rules: into an existing
// directory a source keeps its name; otherwise the target is the copy.
//
// Guest names are untrusted: the supervisor accepts only plain relative names listed after their
// directory, and on the host every directory on the way is checked to be a real directory (not a
// link that would lead the copy elsewhere). Links and special files are skipped in both directions.
//
// This module plans and runs a copy (steps, targets, progress, the result); copy-upload.ts and
// copy-download.ts hold each direction's walking and file transfer.

import { createHash } from "node:crypto";
import { basename, posix } from "node:path";
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
  /**
   * When more than one file was copied: the sha256 of their list as `sha256sum` prints it (each
   * file's sha256, two spaces, its destination path, a newline), in the order they were copied.
   */
  treeSha256?: string;
  /** Links and special files left out (the first 20), paths relative to their source. */
  skipped: { path: string; type: string }[];
  /** How many were left out in all. */
  skippedCount: number;
}

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
export interface Step {
  kind: "directory" | "file";
  from: string;
  to: string;
  size: number;
  mode: number;
  label: string;
}

export interface Plan {
  steps: Step[];
  skipped: { path: string; type: string }[];
}

export function copyError(message: string, hint: string, details?: Record<string, unknown>): ControllerError {
  return new ControllerError("CONTROLLER_BAD_INPUT", message, { hint, details });
}

/** Ticks progress with bytes done of the total, at most every 200 ms (and at the end). */
export function ticker(progress: (event: ProgressEvent) => void, total: number) {
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

/** The progress of one copy. */
export type Ticker = ReturnType<typeof ticker>;

/** A guest path: absolute, or relative to the workspace. */
export function guestPath(workspace: string, path: string): string {
  return posix.resolve(workspace, path);
}

/** Where each source goes: into `to` when it is a directory, else `to` itself (one source only). */
export function targets(
  sources: readonly string[],
  to: string,
  toIsDir: boolean,
  join2: (a: string, b: string) => string,
) {
  if (!toIsDir && sources.length > 1) {
    throw copyError(
      `cannot copy ${sources.length} sources to ${to}: it is not an existing directory`,
      "Name an existing directory as the target of several sources.",
      { to },
    );
  }
  return sources.map((source) => (toIsDir ? join2(to, basename(source.replace(/\/+$/, "")) || source) : to));
}

/** The target was written as a directory (trailing `/`) but does not exist. */
export function missingDir(to: string): never {
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

/** Runs a planned copy in order: directories before what they hold, progress by bytes. */
export async function runPlan(
  name: string,
  direction: CopyResult["direction"],
  to: string,
  plan: Plan,
  { progress, signal }: CopyOptions,
  copy: {
    directory: (step: Step) => Promise<unknown>;
    file: (step: Step, tick: Ticker) => Promise<{ bytes: number; sha256: string }>;
  },
): Promise<CopyResult> {
  const total = plan.steps.reduce((sum, step) => sum + step.size, 0);
  const tick = ticker(progress, total);
  const result = emptyResult(name, direction, to, plan);
  const tree = createHash("sha256");
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
      tree.update(`${copied.sha256}  ${step.to}\n`);
    }
  }
  tick.add(0, "done", true);
  if (result.files !== 1) delete result.sha256;
  if (result.files > 1) result.treeSha256 = tree.digest("hex");
  return result;
}
