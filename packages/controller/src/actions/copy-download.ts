// Guest to host (`download`): the guest's listing (plain relative names only, checked by the
// supervisor) planned into host paths, every host directory on the way checked to be a real one,
// each file written to a temporary name and renamed into place once its sha256 matched.

import { randomBytes } from "node:crypto";
import { chmod, lstat, mkdir, open, rename, stat, unlink } from "node:fs/promises";
import { basename, dirname, join, posix } from "node:path";
import type { GuestFiles } from "@pi-sandbox/supervisor";
import {
  COPY_FILE_MAX_BYTES,
  COPY_MAX_ENTRIES,
  copyError,
  missingDir,
  runPlan,
  targets,
  type CopyOptions,
  type CopyResult,
  type Plan,
  type Step,
  type Ticker,
} from "./copy-tree.js";
import { escapeControlChars, hasControlChars } from "@pi-sandbox/config";
import { ControllerError } from "../errors.js";
import { concernsDigest, confirmationRequired, writeConcern, type HostConcern, type HostGuard } from "../host-guard.js";
import type { HostPlaces } from "../host-places.js";

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
  tick: Ticker,
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
    await chmod(tmp, hostMode(step.mode));
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

/** The mode a downloaded file gets: the guest's permission bits, never group/other write. */
const hostMode = (guestMode: number) => (guestMode & 0o755) | 0o600;

/**
 * Refuses, before anything is written, a plan that writes where a model may not without the
 * user's yes (host-guard.ts), unless the user allowed exactly these concerns. The error carries
 * them and their digest, so the client can ask the user and call again.
 */
function checkPlan(plan: Plan, guard: HostGuard, places: HostPlaces): void {
  // A name with control characters could make the prompt show another target than the real one
  // (a newline and ESC[8m hide the rest of a line): a model gets none of them, whatever the user says.
  const unprintable = plan.steps.filter((step) => hasControlChars(step.to));
  if (unprintable.length > 0) {
    const names = unprintable.slice(0, 5).map((step) => escapeControlChars(step.from));
    throw new ControllerError(
      "CONTROLLER_GUEST_NAME_REFUSED",
      `the download names ${unprintable.length} guest path(s) with control characters, which a model may not bring to the host: ${names.join(", ")}`,
      {
        hint: "Rename them in the guest (or pack them into an archive) and download again; the user can copy them with pi-sandbox cp.",
        details: { count: unprintable.length },
      },
    );
  }
  const concerns: HostConcern[] = [];
  for (const step of plan.steps) {
    const concern = writeConcern(guard, step.to, places, step.kind === "file" ? hostMode(step.mode) : undefined);
    if (concern) concerns.push(concern);
  }
  if (concerns.length === 0) return;
  const digest = concernsDigest(concerns);
  if (digest === guard.approved) return;
  throw confirmationRequired(concerns, digest);
}

/** Copies guest `sources` (absolute) to host path `to` (absolute); `guard` limits a model's call. */
export async function download(
  files: GuestFiles,
  name: string,
  sources: readonly string[],
  to: string,
  options: CopyOptions & { guard?: { limits: HostGuard; places: HostPlaces } },
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
  if (options.guard) checkPlan(plan, options.guard.limits, options.guard.places);
  return runPlan(name, "download", to, plan, options, {
    directory: (step) => hostDirectory(step.to, step.mode),
    file: (step, tick) => downloadFile(files, step, tick, signal),
  });
}
