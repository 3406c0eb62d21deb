// `nx run workspace:lint`: fails when a source file does not open with a header comment saying
// what it is for (CONTRIBUTING.md, "Files"). Prints each offending path; silent when all pass.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";

const ROOTS = ["packages", "e2e", "scripts"];
const SOURCE = /\.(ts|mts|mjs|cjs|py)$/;
const SKIPPED = /(^|\/)(dist|node_modules)\/|\.d\.m?ts$/;
const JS_HEADER = /^(\/\/|\/\*)/;
// A comment, or a module docstring (optionally raw or unicode-prefixed).
const PY_HEADER = /^(#|[rRuU]?("""|'''))/;

// Tracked files, and new ones not yet added (so a local lint catches them before the commit);
// a file deleted from the work tree but still in the index is not there to check.
const listed = spawnSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ...ROOTS], {
  encoding: "utf8",
  maxBuffer: 64 * 1024 * 1024,
});
if (listed.status !== 0) {
  process.stderr.write(`check-headers: git ls-files failed: ${listed.error?.message ?? listed.stderr}`);
  process.exit(2);
}
const files = [...new Set(listed.stdout.split("\0"))]
  .filter((path) => SOURCE.test(path) && !SKIPPED.test(path) && existsSync(path))
  .sort();

/** The first non-empty line after an optional shebang, trimmed; "" for an empty file. */
function firstLine(path) {
  const lines = readFileSync(path, "utf8")
    .replace(/^\uFEFF/, "")
    .split(/\r?\n/);
  if (lines[0]?.startsWith("#!")) lines.shift();
  return lines.find((line) => line.trim() !== "")?.trim() ?? "";
}

const missing = files.filter((path) => !(path.endsWith(".py") ? PY_HEADER : JS_HEADER).test(firstLine(path)));
for (const path of missing) process.stdout.write(`${path}\n`);
process.exit(missing.length > 0 ? 1 : 0);
