import { randomBytes } from "node:crypto";
import fsp from "node:fs/promises";
import path from "node:path";

/** Flushes a file's data and metadata to stable storage. */
export async function fsyncFile(file: string): Promise<void> {
  const handle = await fsp.open(file, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Makes a directory's entries (creations, renames, unlinks) durable. */
export async function fsyncDir(dir: string): Promise<void> {
  const handle = await fsp.open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Replaces `file` with `data` so that a crash at any instant leaves either the old or the new
 * content, never a mix: temp file in the same directory, fsync, rename, fsync the directory.
 */
export async function writeFileAtomic(file: string, data: string | Buffer, mode = 0o600): Promise<void> {
  const dir = path.dirname(file);
  const temp = path.join(dir, `.tmp-${path.basename(file)}-${randomBytes(4).toString("hex")}`);
  const handle = await fsp.open(temp, "wx", mode);
  try {
    await handle.writeFile(data);
    await handle.sync();
  } finally {
    await handle.close();
  }
  try {
    await fsp.rename(temp, file);
  } catch (error) {
    await fsp.rm(temp, { force: true });
    throw error;
  }
  await fsyncDir(dir);
}

/** Reads and parses a JSON file; `undefined` when it does not exist. */
export async function readJsonIfExists(file: string): Promise<unknown> {
  let text: string;
  try {
    text = await fsp.readFile(file, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
  return JSON.parse(text) as unknown;
}

/** Bytes a file really occupies on disk (sparse-aware). */
export async function allocatedBytes(file: string): Promise<number> {
  const stat = await fsp.stat(file);
  return stat.blocks * 512;
}
