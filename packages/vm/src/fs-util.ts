// Small file helpers for crash safety: fsync of files and directories, JSON reads, allocated
// bytes.
import fsp from "node:fs/promises";

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
