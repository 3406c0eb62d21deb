// `apply`'s host side: a checked guest patch (patch-parse.ts) applied to a host directory with the
// host's git. Before git sees it, every path it touches must be a plain relative path (no `..`,
// no `.git`, no control characters) that reaches the directory through no host symlink, every
// symlink it writes must point inside the directory, and git's own reading of the patch must name
// the same files. A model's call has its paths judged like a download's (host-guard.ts). In a git
// work tree, files with uncommitted changes are left alone unless forced, and the patch merges
// like `git apply --3way`; elsewhere it applies like `git apply`. Git runs with no system or
// global config and no hooks.

import { spawn } from "node:child_process";
import { lstat, mkdtemp, readlink, realpath, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, posix, relative, sep } from "node:path";
import { escapeControlChars, hasControlChars } from "@pi-sandbox/config";
import { ControllerError } from "../errors.js";
import { concernsDigest, confirmationRequired, writeConcern, type HostConcern, type HostGuard } from "../host-guard.js";
import type { HostPlaces } from "../host-places.js";
import { foldName } from "../host-places.js";
import { patchRefused, type ParsedPatch, type PatchFile } from "./patch-parse.js";

/** How a patch was applied. */
export interface ApplyOutcome {
  /** The directory (real path). */
  to: string;
  /** The directory is in a git work tree. */
  gitWorkTree: boolean;
  /** `3way`: `git apply --3way` (index and work tree); `plain`: `git apply` (files only). */
  how: "3way" | "plain";
  /** Files left with conflict markers by the 3-way merge, relative to `to`. */
  conflicts: string[];
}

/** What the git run returned. */
interface GitRun {
  code: number;
  stdout: Buffer;
  stderr: string;
}

/** Most bytes of a git run's output kept, its stdout in full up to this. */
const GIT_OUTPUT_MAX_BYTES = 64 * 1024 * 1024;

/** Names git and the file systems it runs on take for `.git` (case, trailing dots and spaces, the 8.3 name). */
function isGitDirName(part: string): boolean {
  const folded = foldName(part)
    .replace(/[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]/g, "")
    .replace(/[. ]+$/, "");
  return folded === ".git" || folded === "git~1";
}

/** Why `path` (from the patch) may not be written, if it may not. */
function pathProblem(path: string): string | undefined {
  if (path.length === 0) return "is empty";
  if (path.length > 4096) return "is longer than 4096 characters";
  if (hasControlChars(path)) return "holds control characters";
  if (path.startsWith("/")) return "is absolute";
  const parts = path.split("/");
  if (parts.some((p) => p === "")) return "has an empty part";
  if (parts.some((p) => p === "." || p === "..")) return "has a . or .. part";
  if (parts.some(isGitDirName)) return "is inside a .git directory";
  return undefined;
}

/** Why a symlink at `path` pointing at `target` may not be written, if it may not. */
function symlinkProblem(path: string, target: string): string | undefined {
  if (target === "" || hasControlChars(target)) return "has an empty or unprintable target";
  if (target.startsWith("/")) return `points at the absolute path ${target}`;
  const resolved = posix.normalize(posix.join(posix.dirname(path), target));
  if (resolved === ".." || resolved.startsWith("../")) return `points outside the directory (${target})`;
  if (resolved.split("/").some(isGitDirName)) return `points into a .git directory (${target})`;
  return undefined;
}

function refusedPath(path: string, why: string): ControllerError {
  return patchRefused(`the patch writes ${escapeControlChars(path)}, which ${why}`, { path: escapeControlChars(path) });
}

/** Every path a file's patch touches: the one it writes and the one it renames or copies from. */
function touchedPaths(file: PatchFile): string[] {
  return file.oldPath !== undefined ? [file.oldPath, file.path] : [file.path];
}

/**
 * The path rules, checked against the patch alone: plain relative paths, symlinks pointing inside
 * the directory, and no path under a symlink the same patch writes.
 */
export function checkPatchPaths(patch: ParsedPatch): void {
  const links = new Set<string>();
  for (const file of patch.files) {
    for (const path of touchedPaths(file)) {
      const problem = pathProblem(path);
      if (problem) throw refusedPath(path, problem);
    }
    if (file.symlink !== undefined) {
      const problem = symlinkProblem(file.path, file.symlink);
      if (problem) throw refusedPath(file.path, `is a symlink that ${problem}`);
    }
    if (file.status !== "deleted" && (file.symlink !== undefined || file.newMode === "120000")) links.add(file.path);
  }
  for (const file of patch.files) {
    for (const path of touchedPaths(file)) {
      const parts = path.split("/");
      for (let n = 1; n < parts.length; n++) {
        const above = parts.slice(0, n).join("/");
        if (links.has(above)) throw refusedPath(path, `lies under ${above}, a symlink the same patch writes`);
      }
    }
  }
}

async function lstatOrUndefined(path: string) {
  return lstat(path).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT" || error.code === "ENOTDIR") return undefined;
    throw error;
  });
}

/**
 * The rules that need the host directory: no touched path goes through a symlink there, and a
 * symlink the patch renames or copies without changing it still points inside from its new place.
 */
async function checkHostPaths(patch: ParsedPatch, to: string): Promise<void> {
  const checked = new Set<string>();
  for (const file of patch.files) {
    for (const path of touchedPaths(file)) {
      const parts = path.split("/");
      for (let n = 1; n < parts.length; n++) {
        const above = parts.slice(0, n).join("/");
        if (checked.has(above)) continue;
        checked.add(above);
        if ((await lstatOrUndefined(join(to, above)))?.isSymbolicLink()) {
          throw refusedPath(path, `lies under ${above}, a symlink in ${to}`);
        }
      }
    }
    if (file.oldPath !== undefined && file.symlink === undefined && file.status !== "deleted") {
      const old = join(to, file.oldPath);
      if ((await lstatOrUndefined(old))?.isSymbolicLink()) {
        const problem = symlinkProblem(file.path, await readlink(old));
        if (problem) throw refusedPath(file.path, `is a symlink that ${problem}`);
      }
    }
  }
}

/** The concerns of a model's apply (each path it writes or removes), refused unless the user allowed exactly these. */
function checkGuard(patch: ParsedPatch, to: string, guard: HostGuard, places: HostPlaces): void {
  const concerns: HostConcern[] = [];
  for (const file of patch.files) {
    const writes = file.status === "renamed" ? touchedPaths(file) : [file.path];
    for (const path of writes) {
      const mode =
        path === file.path && file.status !== "deleted" && file.newMode
          ? Number.parseInt(file.newMode, 8) & 0o777
          : undefined;
      const concern = writeConcern(guard, join(to, ...path.split("/")), places, mode);
      if (concern) concerns.push(concern);
    }
  }
  if (concerns.length === 0) return;
  const digest = concernsDigest(concerns);
  if (digest === guard.approved) return;
  throw confirmationRequired(concerns, digest);
}

/** Git's environment: no system or user config (HOME is an empty directory), C locale, no prompts. */
function gitEnv(home: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin",
    HOME: home,
    XDG_CONFIG_HOME: home,
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: "/dev/null",
    GIT_TERMINAL_PROMPT: "0",
    GIT_OPTIONAL_LOCKS: "0",
    LC_ALL: "C",
    ...extra,
  };
}

/** Runs the host's git with `args` in `cwd`; CONTROLLER_HOST_GIT_MISSING when there is none. */
export function hostGit(
  args: readonly string[],
  options: { cwd: string; home: string; input?: Buffer; env?: NodeJS.ProcessEnv },
): Promise<GitRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      "git",
      ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.quotePath=true", ...args],
      { cwd: options.cwd, env: gitEnv(options.home, options.env), stdio: ["pipe", "pipe", "pipe"] },
    );
    const out: Buffer[] = [];
    let outBytes = 0;
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => {
      outBytes += chunk.length;
      if (outBytes <= GIT_OUTPUT_MAX_BYTES) out.push(chunk);
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr = (stderr + chunk.toString("utf8")).slice(-16_384);
    });
    child.on("error", (error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") {
        reject(
          new ControllerError("CONTROLLER_HOST_GIT_MISSING", "the host has no git, which apply needs", {
            hint: "Install git on the host (e.g. apt-get install git, brew install git), or look at the changes with diff.",
          }),
        );
      } else reject(error);
    });
    child.on("close", (code) => resolve({ code: code ?? 1, stdout: Buffer.concat(out), stderr }));
    // git may exit before it read its input (a bad option): a write error then is not ours.
    child.stdin.on("error", () => undefined);
    child.stdin.end(options.input ?? Buffer.alloc(0));
  });
}

/**
 * Git's own list of the files a patch writes (`git apply --numstat -z`, outside any repository)
 * must be this reader's: a patch the two read differently is refused.
 */
async function checkGitReading(patch: Buffer, parsed: ParsedPatch, home: string): Promise<void> {
  const run = await hostGit(["apply", "--numstat", "-z", "--whitespace=nowarn", "-"], {
    cwd: home,
    home,
    input: patch,
    env: { GIT_CEILING_DIRECTORIES: dirname(home) },
  });
  if (run.code !== 0) {
    throw patchRefused(`git does not read the guest's patch: ${escapeControlChars(run.stderr.trim().slice(-500))}`);
  }
  const fields = run.stdout.toString("utf8").split("\0");
  const theirs: string[] = [];
  for (let i = 0; i < fields.length - 1;) {
    const m = /^(?:\d+|-)\t(?:\d+|-)\t(.*)$/s.exec(fields[i]!);
    if (!m) throw patchRefused("git's reading of the guest's patch could not be understood");
    if (m[1] === "") {
      // Another git may name a rename's both paths; the one written is the second.
      theirs.push(fields[i + 2] ?? "");
      i += 3;
    } else {
      theirs.push(m[1]!);
      i += 1;
    }
  }
  // git apply names a renamed or copied file by the path it writes.
  const ours = parsed.files.map((f) => f.path);
  if (JSON.stringify([...theirs].sort()) !== JSON.stringify([...ours].sort())) {
    throw patchRefused("git reads the guest's patch as touching other files than it shows, so it was refused");
  }
}

/** The work tree holding `dir`, if any: its top (real path). */
async function workTreeOf(dir: string, home: string): Promise<string | undefined> {
  const run = await hostGit(["rev-parse", "--is-inside-work-tree", "--show-toplevel"], { cwd: dir, home });
  if (run.code !== 0) return undefined;
  const [inside, top] = run.stdout.toString("utf8").replace(/\n$/, "").split("\n");
  return inside === "true" && top ? realpath(top) : undefined;
}

/** The touched paths (relative to `to`) that have uncommitted changes, untracked files included. */
async function uncommitted(patch: ParsedPatch, to: string, top: string, home: string): Promise<string[]> {
  const run = await hostGit(["status", "--porcelain=v1", "-z", "--untracked-files=all", "--", "."], {
    cwd: to,
    home,
  });
  if (run.code !== 0) {
    throw new ControllerError(
      "CONTROLLER_PATCH_FAILED",
      `git status failed in ${to}: ${escapeControlChars(run.stderr.trim().slice(-500))}`,
      {
        hint: "Check the repository with git status, then apply again.",
      },
    );
  }
  const prefix = relative(top, to).split(sep).filter(Boolean).join("/");
  const touched = new Map<string, string>();
  for (const file of patch.files) {
    for (const path of touchedPaths(file)) touched.set(prefix ? `${prefix}/${path}` : path, path);
  }
  const dirty = new Set<string>();
  const fields = run.stdout.toString("utf8").split("\0");
  for (let i = 0; i < fields.length - 1; i++) {
    const entry = fields[i]!;
    const paths = [entry.slice(3)];
    // A rename or copy names its source in the next field.
    if (/^[RC]/.test(entry)) paths.push(fields[++i] ?? "");
    for (const path of paths) {
      const ours = touched.get(path);
      if (ours !== undefined) dirty.add(ours);
    }
  }
  return [...dirty].sort();
}

/**
 * Applies `patch` (its bytes, and its checked reading `parsed`) to host directory `to`. Throws
 * CONTROLLER_PATCH_REFUSED (a path or symlink the rules refuse), CONTROLLER_CONFIRMATION_REQUIRED
 * (a model's call the user has not allowed), CONTROLLER_UNCOMMITTED_CHANGES,
 * CONTROLLER_PATCH_FAILED (git could not apply it; nothing was changed) or
 * CONTROLLER_HOST_GIT_MISSING.
 */
export async function applyPatch(
  patch: Buffer,
  parsed: ParsedPatch,
  to: string,
  options: { force?: boolean; guard?: { limits: HostGuard; places: HostPlaces } },
): Promise<ApplyOutcome> {
  const target = await stat(to).catch(() => undefined);
  if (!target?.isDirectory()) {
    throw new ControllerError("CONTROLLER_BAD_INPUT", `${to} is not a directory`, {
      hint: "Name an existing directory to apply the changes to (default: the current one).",
      details: { to },
    });
  }
  const dir = await realpath(to);
  checkPatchPaths(parsed);
  await checkHostPaths(parsed, dir);
  if (options.guard) checkGuard(parsed, dir, options.guard.limits, options.guard.places);
  const home = await mkdtemp(join(tmpdir(), "pisb-apply-"));
  try {
    await checkGitReading(patch, parsed, home);
    const top = await workTreeOf(dir, home);
    if (top !== undefined && !options.force) {
      const dirty = await uncommitted(parsed, dir, top, home);
      if (dirty.length > 0) {
        const shown = dirty.slice(0, 10).map((p) => escapeControlChars(p));
        throw new ControllerError(
          "CONTROLLER_UNCOMMITTED_CHANGES",
          `the patch touches ${dirty.length} file(s) with uncommitted changes in ${dir}: ${shown.join(", ")}${dirty.length > 10 ? ", …" : ""}; nothing was changed`,
          {
            hint: "Commit or stash them first (git stash), or apply with force to patch the files as they are now.",
            details: { to: dir, files: dirty.slice(0, 100) },
          },
        );
      }
    }
    const how = top !== undefined && !options.force ? "3way" : "plain";
    // In a work tree git apply takes the patch's paths from the top and skips what lies outside the
    // directory it runs in: it runs at the top, told where the patch belongs.
    const prefix = top === undefined ? "" : relative(top, dir).split(sep).filter(Boolean).join("/");
    const run = await hostGit(
      [
        "apply",
        ...(how === "3way" ? ["--3way"] : []),
        ...(prefix ? [`--directory=${prefix}`] : []),
        "--whitespace=nowarn",
        "-",
      ],
      { cwd: top ?? dir, home, input: patch },
    );
    const conflicts = how === "3way" ? await unmerged(dir, home) : [];
    if (/^Skipped patch /m.test(run.stderr)) {
      throw new ControllerError(
        "CONTROLLER_PATCH_FAILED",
        `git apply skipped part of the patch in ${dir}: ${escapeControlChars(run.stderr.trim().slice(-1500))}`,
        {
          hint: "Apply to the top of the work tree, or report this: the directory and the repository disagree.",
          details: { to: dir },
        },
      );
    }
    if (run.code !== 0 && conflicts.length === 0) {
      throw new ControllerError(
        "CONTROLLER_PATCH_FAILED",
        `git apply could not apply the workspace's changes to ${dir}; nothing was changed: ${escapeControlChars(run.stderr.trim().slice(-1500))}`,
        {
          hint:
            how === "3way"
              ? "The files there differ from the ones the changes were made on, and git has not the blobs to merge them: apply to a checkout of the same commit, or look at the patch with diff."
              : "The files there differ from the ones the changes were made on: apply to a copy of the workspace as it was, or to a git work tree (which merges), or look at the patch with diff.",
          details: { to: dir },
        },
      );
    }
    return { to: dir, gitWorkTree: top !== undefined, how, conflicts };
  } finally {
    await rm(home, { recursive: true, force: true });
  }
}

/** Files with unmerged entries after a 3-way apply, relative to `dir`. */
async function unmerged(dir: string, home: string): Promise<string[]> {
  const run = await hostGit(["ls-files", "-u", "-z"], { cwd: dir, home });
  if (run.code !== 0) return [];
  const paths = new Set<string>();
  for (const entry of run.stdout.toString("utf8").split("\0")) {
    const tab = entry.indexOf("\t");
    if (tab > 0) paths.add(entry.slice(tab + 1));
  }
  return [...paths].sort();
}
