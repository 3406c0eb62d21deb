// `nx run workspace:lint`: fails when a source file under packages/*/src (tests aside) is longer
// than 400 lines (CONTRIBUTING.md, "Files"). Prints each offending path with its length.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";

const MAX_LINES = 400;
const SOURCE = /^packages\/[^/]+\/src\/.*\.(ts|mts|cts|js|mjs|cjs|py|sh)$/;
const SKIPPED = /\.test\.[cm]?ts$|\.d\.[cm]?ts$|(^|\/)(dist|node_modules)\//;

/**
 * Files that were over the limit when this check came, each held at the length it had then until
 * it is split: longer fails, and so does an entry whose file is back under the limit (delete the
 * entry). Each is named on every run. Add nothing here: split the file.
 */
const NOT_YET_SPLIT = {
};

// Tracked files and new ones not yet added, as check-headers.mjs lists them.
const listed = spawnSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "packages"], {
  encoding: "utf8",
  maxBuffer: 64 * 1024 * 1024,
});
if (listed.status !== 0) {
  process.stderr.write(`check-file-size: git ls-files failed: ${listed.error?.message ?? listed.stderr}\n`);
  process.exit(2);
}
const files = [...new Set(listed.stdout.split("\0"))]
  .filter((path) => SOURCE.test(path) && !SKIPPED.test(path) && existsSync(path))
  .sort();

/** Lines as `wc -l` and an editor count them: a final line without a line break still counts. */
function lineCount(path) {
  const text = readFileSync(path, "utf8");
  if (text === "") return 0;
  return text.split("\n").length - (text.endsWith("\n") ? 1 : 0);
}

let failed = false;
for (const path of files) {
  const lines = lineCount(path);
  const allowed = NOT_YET_SPLIT[path];
  if (allowed === undefined) {
    if (lines <= MAX_LINES) continue;
    failed = true;
    process.stdout.write(`${path}: ${lines} lines, over ${MAX_LINES}: split it by concern\n`);
  } else if (lines > allowed) {
    failed = true;
    process.stdout.write(
      `${path}: ${lines} lines, over ${MAX_LINES} and longer than its ${allowed} when listed: split it\n`,
    );
  } else if (lines <= MAX_LINES) {
    failed = true;
    process.stdout.write(
      `${path}: ${lines} lines now: delete its NOT_YET_SPLIT entry in scripts/check-file-size.mjs\n`,
    );
  } else {
    process.stderr.write(`check-file-size: ${path} has ${lines} lines, over ${MAX_LINES}; listed, not yet split\n`);
  }
}
for (const path of Object.keys(NOT_YET_SPLIT)) {
  if (!files.includes(path)) {
    failed = true;
    process.stdout.write(`${path}: gone: delete its NOT_YET_SPLIT entry in scripts/check-file-size.mjs\n`);
  }
}
process.exit(failed ? 1 : 0);
