// Writing a small JSON file so that readers see the old or the new content, never half of one.
import { writeFileAtomic } from "@pi-sandbox/config";

/** Writes `value` as indented JSON to `file` through a temporary file and a rename (mode 0644). */
export async function writeJsonFile(file: string, value: unknown): Promise<void> {
  await writeFileAtomic(file, `${JSON.stringify(value, null, 2)}\n`, 0o644);
}
