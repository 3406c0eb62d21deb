// Reading the controller's JSON state files (written with config's `writeJsonAtomic`): a missing
// file is undefined, a torn or foreign one is CONTROLLER_STATE_CORRUPT.
import { readFile } from "node:fs/promises";
import { ControllerError } from "../errors.js";

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
