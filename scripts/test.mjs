// `npm test`: lint, test and build every project through Nx, as before, and when something fails,
// end with a short summary of what failed. The full run prints tens of thousands of lines; a
// failure in an early project scrolls out of sight (and out of a CI log's tail) long before Nx
// names the failed targets.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;
// Jest's failing suite and test headers (with the first lines of what went wrong under each),
// TypeScript and ESLint errors, pytest's failed tests.
const FAIL_LINE = /^\s*(FAIL |● (?!Console)|>\s+\d+ \||\d+:\d+\s+error\s)|error TS\d+|^FAILED /;
const DETAIL_LINES = 6;
const MAX_SUMMARY_LINES = 200;

const nx = process.platform === "win32" ? "nx.cmd" : "nx";
const child = spawn(nx, ["run-many", "-t", "lint", "test", "build", "--outputStyle=static", ...process.argv.slice(2)], {
  stdio: ["inherit", "pipe", "pipe"],
});

const summary = [];
let project = "";
let detail = 0;
function scan(line) {
  const plain = line.replace(ANSI, "");
  const target = /^> nx run (\S+)/.exec(plain.trim());
  if (target) project = target[1];
  if (FAIL_LINE.test(plain)) {
    summary.push(`[${project}] ${plain.trim()}`);
    detail = plain.includes("●") ? DETAIL_LINES : 0;
  } else if (detail > 0 && plain.trim()) {
    summary.push(`[${project}]     ${plain.trim()}`);
    detail--;
  }
}
for (const [stream, out] of [
  [child.stdout, process.stdout],
  [child.stderr, process.stderr],
]) {
  createInterface({ input: stream, crlfDelay: Infinity }).on("line", (line) => {
    out.write(line + "\n");
    scan(line);
  });
}

const code = await new Promise((resolve) => child.on("close", (status, signal) => resolve(status ?? (signal ? 1 : 0))));
if (code !== 0 && summary.length > 0) {
  const shown = summary.slice(0, MAX_SUMMARY_LINES);
  process.stdout.write(`\nnpm test failed; what the test runners reported as failing (${summary.length} lines):\n`);
  for (const line of shown) process.stdout.write(`  ${line}\n`);
  if (summary.length > shown.length) process.stdout.write(`  … ${summary.length - shown.length} more lines above\n`);
}
process.exit(code);
