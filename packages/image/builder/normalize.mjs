// Making file trees byte-reproducible before they are packed.
import { SOURCE_DATE_EPOCH } from "./config.mjs";
import { run } from "./proc.mjs";

/** Set every mtime below `dir` (symlinks included, not followed) to SOURCE_DATE_EPOCH. */
export async function normalizeMtimes(dir) {
  await run("find", [dir, "-xdev", "-exec", "touch", "--no-dereference", "--date", `@${SOURCE_DATE_EPOCH}`, "{}", "+"]);
}
