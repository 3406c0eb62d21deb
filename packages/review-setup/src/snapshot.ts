// Host side of a refresh: list the checkout's tracked working files, pack them, hash the archive.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, existsSync } from "node:fs";
import { lstat, mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { ReviewSetupError } from "./errors.js";

/** Which version control the snapshot came from. */
export type Vcs = "git" | "jj";

/** Files of the working state to ship. */
export interface WorkingFiles {
  /** Version control used to list the files. */
  vcs: Vcs;
  /** Checkout root (absolute). */
  root: string;
  /** Root-relative paths of tracked files that exist in the working tree, sorted. */
  files: string[];
}

/** A packed snapshot on the host. */
export interface Snapshot extends WorkingFiles {
  /** Host path of the gzip tar archive. */
  archivePath: string;
  /** Archive size in bytes. */
  bytes: number;
  /** Lowercase hex sha256 of the archive. */
  sha256: string;
  /** Removes the archive's temp directory. */
  close(): Promise<void>;
}

/** Runs a program and resolves with stdout; rejects with stderr in the message. */
function run(file: string, args: string[], cwd: string, env?: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    execFile(file, args, { cwd, env, maxBuffer: 256 * 1024 * 1024, encoding: "utf8" }, (error, stdout, stderr) => {
      if (error) reject(Object.assign(error, { stderr }));
      else resolvePromise(stdout);
    });
  });
}

async function hasProgram(name: string, env?: NodeJS.ProcessEnv): Promise<boolean> {
  return run(name, ["--version"], process.cwd(), env).then(
    () => true,
    () => false,
  );
}

/** Nearest directory at or above `start` holding `.jj` or `.git`. */
function findCheckoutRoot(start: string): { root: string; jj: boolean } | undefined {
  for (let dir = resolve(start); ; dir = dirname(dir)) {
    const jj = existsSync(join(dir, ".jj"));
    if (jj || existsSync(join(dir, ".git"))) return { root: dir, jj };
    if (dirname(dir) === dir) return undefined;
  }
}

/**
 * Lists the tracked files of the checkout containing `dir` as they are in the working tree:
 * edits are read from disk, deleted files are left out, untracked files are not listed. A JJ
 * workspace (a `.jj` directory with `jj` on PATH) uses its working revision, which jj snapshots
 * from the working tree on every command (new files count if jj auto-tracks them).
 */
export async function listWorkingFiles(dir: string, options: SnapshotOptions = {}): Promise<WorkingFiles> {
  const env = options.env;
  const found = findCheckoutRoot(dir);
  if (!found) {
    throw new ReviewSetupError("REVIEW_SETUP_NOT_A_REPO", `${resolve(dir)} is not inside a git or jj checkout`, {
      hint: "Run from a checkout of the repository, or pass --repo <dir>.",
      details: { dir: resolve(dir) },
    });
  }
  const useJj = found.jj && (await hasProgram("jj", env));
  const vcs: Vcs = useJj ? "jj" : "git";
  let listed: string[];
  try {
    if (useJj) {
      listed = (await run("jj", ["file", "list", "--no-pager", "--color=never"], found.root, env))
        .split("\n")
        .filter((line) => line !== "");
    } else {
      const cached = (await run("git", ["ls-files", "-z", "--cached"], found.root, env)).split("\0");
      const deleted = new Set((await run("git", ["ls-files", "-z", "--deleted"], found.root, env)).split("\0"));
      listed = cached.filter((path) => path !== "" && !deleted.has(path));
    }
  } catch (error) {
    const stderr = String((error as { stderr?: string }).stderr ?? "").trim();
    throw new ReviewSetupError(
      "REVIEW_SETUP_NOT_A_REPO",
      `${vcs} could not list the files of ${found.root}: ${stderr}`,
      {
        hint: `Check that \`${vcs}\` works in ${found.root}.`,
        details: { root: found.root, vcs },
        cause: error,
      },
    );
  }
  const files: string[] = [];
  for (const path of [...new Set(listed)].sort()) {
    // Submodule gitlinks list as directories, and a file may vanish between listing and packing.
    const info = await lstat(join(found.root, path)).catch(() => undefined);
    if (info && !info.isDirectory()) files.push(path);
  }
  return { vcs, root: found.root, files };
}

/** Options of `listWorkingFiles` and `createSnapshot`. */
export interface SnapshotOptions {
  /** Environment for git, jj and tar (PATH decides whether jj is used); default `process.env`. */
  env?: NodeJS.ProcessEnv;
}

/** Lowercase hex sha256 of a file. */
export async function sha256File(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/** Packs the working files of the checkout containing `dir` into a gzip tar and hashes it. */
export async function createSnapshot(dir: string, options: SnapshotOptions = {}): Promise<Snapshot> {
  const working = await listWorkingFiles(dir, options);
  if (working.files.length === 0) {
    throw new ReviewSetupError("REVIEW_SETUP_SNAPSHOT_FAILED", `${working.root} has no tracked files to snapshot`, {
      hint: "Add the files to version control first.",
    });
  }
  const temp = await mkdtemp(join(tmpdir(), "review-snapshot-"));
  const close = () => rm(temp, { recursive: true, force: true });
  try {
    const listPath = join(temp, "files");
    const archivePath = join(temp, "snapshot.tar.gz");
    await writeFile(listPath, working.files.join("\0") + "\0");
    // --no-recursion: a listed path is exactly one entry, so nothing untracked rides along.
    await run(
      "tar",
      ["-czf", archivePath, "--no-recursion", "--owner=0", "--group=0", "--numeric-owner", "--null", "-T", listPath],
      working.root,
      options.env,
    );
    const bytes = (await stat(archivePath)).size;
    return { ...working, archivePath, bytes, sha256: await sha256File(archivePath), close };
  } catch (error) {
    await close();
    const stderr = String((error as { stderr?: string }).stderr ?? "").trim();
    throw new ReviewSetupError("REVIEW_SETUP_SNAPSHOT_FAILED", `packing ${working.root} failed: ${stderr || error}`, {
      hint: "Check that GNU tar is on PATH and the files are readable.",
      cause: error,
    });
  }
}
