import { randomBytes } from "node:crypto";
import { open, readFile, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { ControllerError } from "../errors.js";

/**
 * Writes JSON so that readers see the old or the new content, never a torn file, even across a
 * crash: temp file in the same directory, fsync, rename, fsync the directory.
 */
export async function writeJsonAtomic(path: string, value: unknown, mode = 0o600): Promise<void> {
  const dir = dirname(path);
  const temp = join(dir, `.${basename(path)}.${randomBytes(6).toString("hex")}.tmp`);
  const handle = await open(temp, "wx", mode);
  try {
    await handle.writeFile(`${JSON.stringify(value, null, 2)}\n`);
    await handle.sync();
  } catch (error) {
    await handle.close();
    await rm(temp, { force: true });
    throw error;
  }
  await handle.close();
  try {
    await rename(temp, path);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
  const dirHandle = await open(dir, "r");
  try {
    await dirHandle.sync();
  } finally {
    await dirHandle.close();
  }
}

/** Reads a JSON file the controller wrote; `undefined` when missing, CONTROLLER_STATE_CORRUPT when unreadable. */
export async function readJson<T>(path: string): Promise<T | undefined> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
  try {
    return JSON.parse(text) as T;
  } catch (error) {
    throw new ControllerError("CONTROLLER_STATE_CORRUPT", `state file ${path} is not valid JSON`, {
      hint: "Move the file aside and run `pi-sandbox doctor`; the disk checkpoint is kept separately.",
      details: { path },
      cause: error,
    });
  }
}
