// Writing a small JSON file so that readers see the old or the new content, never half of one.
import { rename, writeFile } from "node:fs/promises";

/** Writes `value` as indented JSON to `file` through a temporary file and a rename. */
export async function writeJsonFile(file: string, value: unknown): Promise<void> {
  const tmp = `${file}.${process.pid}.${Date.now()}.tmp`;
  await writeFile(tmp, `${JSON.stringify(value, null, 2)}\n`, { mode: 0o644 });
  await rename(tmp, file);
}
