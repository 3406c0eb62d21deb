// The on-disk cache: finished entries are published by one rename, builds happen in ".tmp-*"
// directories on the same filesystem, and a kernel lock (flock) serialises concurrent builders.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, rename } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { log, run } from "./proc.mjs";

/** `${XDG_CACHE_HOME:-$HOME/.cache}/pi-sandbox/images`: builds, names, helpers, downloads, Zig. */
export function cacheRoot(env = process.env) {
  const base = env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache");
  return path.resolve(base, "pi-sandbox", "images");
}

/** Directory of the finished image `id` below the cache root. */
export function buildDir(root, id) {
  return path.join(root, "builds", id);
}

/**
 * Take the cache-wide build lock. It is held by a `flock` child whose stdin we keep open, so the
 * kernel releases it when this process dies for any reason — there is no stale lock to clean up.
 *
 * @returns {Promise<() => Promise<void>>} release function
 */
export async function acquireLock(root) {
  await mkdir(root, { recursive: true });
  const lockPath = path.join(root, ".lock");
  const child = spawn("flock", ["--exclusive", lockPath, "sh", "-c", "echo locked; exec cat >/dev/null"], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  let waitingNoticeTimer = setTimeout(() => log(`waiting for another build to release ${lockPath}`), 2000);
  await new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (chunk) => {
      out += chunk;
      if (out.includes("locked")) resolve(undefined);
    });
    child.on("error", (err) => reject(new Error(`could not run flock (util-linux): ${err.message}`)));
    child.on("exit", (code) => reject(new Error(`flock on ${lockPath} exited early (code ${code})`)));
  });
  clearTimeout(waitingNoticeTimer);
  waitingNoticeTimer = undefined;
  return async () => {
    child.stdin.end();
    await new Promise((resolve) => (child.exitCode === null ? child.on("exit", resolve) : resolve(undefined)));
  };
}

/** Mount points at or below `dir`, deepest first. */
async function mountsBelow(dir) {
  const text = await readFile("/proc/self/mountinfo", "utf8");
  const prefix = dir.endsWith("/") ? dir : `${dir}/`;
  return text
    .split("\n")
    .map((line) => line.split(" ")[4])
    .filter((mp) => mp !== undefined)
    .map((mp) => mp.replace(/\\([0-7]{3})/g, (_, oct) => String.fromCharCode(parseInt(oct, 8))))
    .filter((mp) => mp === dir || mp.startsWith(prefix))
    .sort((a, b) => b.length - a.length);
}

/**
 * Remove a build directory safely: first detach anything an interrupted debootstrap left mounted
 * inside it, then delete without crossing into other filesystems.
 */
export async function removeBuildDir(dir) {
  if (!existsSync(dir)) return;
  for (const mp of await mountsBelow(dir)) {
    await run("umount", ["--lazy", mp]).catch((err) => log(`could not unmount ${mp}: ${err.message}`));
  }
  await run("rm", ["-rf", "--one-file-system", dir]);
}

/** Delete temporary directories of earlier builds that died. Call only while holding the lock. */
export async function sweepStaleBuilds(root) {
  const entries = await readdir(root).catch(() => []);
  for (const name of entries) {
    if (!name.startsWith(".tmp-")) continue;
    log(`removing leftovers of an interrupted build: ${name}`);
    await removeBuildDir(path.join(root, name));
  }
}

/** A fresh temporary directory inside `root` (same filesystem as the final entry). */
export async function makeBuildDir(root, label) {
  const dir = path.join(root, `.tmp-${label}-${process.pid}-${Date.now()}`);
  await mkdir(dir, { recursive: true });
  return dir;
}

/** Atomically publish `from` as `to` (both under the cache root). */
export async function publish(from, to) {
  await rename(from, to);
}
