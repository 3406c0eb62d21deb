// Crash-safe file replacement, the one implementation every package's state files use: temp file
// in the same directory, fsync, rename over the old file, fsync the directory.
import { randomBytes } from "node:crypto";
import { open, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

/**
 * Replaces `file` with `data` so that a crash at any instant leaves either the old or the new
 * content, never a mix. `mode` applies to a new file (default 0600). The temp file is named
 * `.tmp-<name>-<hex>` beside it (vm's disk cleanup removes such leftovers) and removed on failure.
 */
export async function writeFileAtomic(file: string, data: string | Uint8Array, mode = 0o600): Promise<void> {
  const dir = dirname(file);
  const temp = join(dir, `.tmp-${basename(file)}-${randomBytes(4).toString("hex")}`);
  const handle = await open(temp, "wx", mode);
  try {
    try {
      await handle.writeFile(data);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temp, file);
  } catch (error) {
    await rm(temp, { force: true }).catch(() => undefined);
    throw error;
  }
  // The rename is only durable once the directory entry is on disk.
  const dirHandle = await open(dir, "r");
  try {
    await dirHandle.sync();
  } finally {
    await dirHandle.close();
  }
}

/** {@link writeFileAtomic} of `value` as indented JSON with a final line break. */
export async function writeJsonAtomic(file: string, value: unknown, mode = 0o600): Promise<void> {
  await writeFileAtomic(file, `${JSON.stringify(value, null, 2)}\n`, mode);
}
