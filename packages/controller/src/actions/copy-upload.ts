// Host to guest (`upload`): the host tree walked with lstat (links and special files skipped), each
// file sent with its sha256, which the guest checks before the file takes its place.

import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { lstat, open, readdir, stat } from "node:fs/promises";
import { basename, join, posix } from "node:path";
import type { GuestFiles, GuestStat } from "@pi-sandbox/supervisor";
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

type Kind = "file" | "directory" | "symlink" | "other";

export function kindOfHost(st: Awaited<ReturnType<typeof lstat>>): Kind {
  if (st.isFile()) return "file";
  if (st.isDirectory()) return "directory";
  if (st.isSymbolicLink()) return "symlink";
  return "other";
}

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
  tick: Ticker,
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
