// `npm test`: lint, test and build every project through Nx, as before, and when something fails,
// end with a short summary of what failed. The full run prints tens of thousands of lines; a
// failure in an early project scrolls out of sight (and out of a CI log's tail) long before Nx
// names the failed targets. At the end it also lists how long each Nx task took, slowest first
// (from Nx's own task profile, NX_PROFILE), so the slowest suite shows in every log's tail.
// Before Nx starts, it makes or finds the guest test image once for every VM suite.
// `--targets=a,b` runs those targets instead (the root `npm run test:unit` uses it); every other
// argument goes to Nx.
import { spawn, spawnSync } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { createInterface } from "node:readline";

const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;
// Jest's failing suite and test headers (with the first lines of what went wrong under each),
// TypeScript and ESLint errors, pytest's failed tests.
const FAIL_LINE = /^\s*(FAIL |● (?!Console)|>\s+\d+ \||\d+:\d+\s+error\s)|error TS\d+|^FAILED /;
const DETAIL_LINES = 6;
const MAX_SUMMARY_LINES = 200;

const targetsArg = process.argv.slice(2).find((arg) => arg.startsWith("--targets="));
const targets = targetsArg ? targetsArg.slice("--targets=".length).split(",") : ["lint", "test", "build"];
const nxArgs = process.argv.slice(2).filter((arg) => arg !== targetsArg);
// Relative to the cwd (Nx joins it to the cwd); one file per run, as several runs may share a checkout.
const profile = `.nx/test-timings-${process.pid}.json`;

/**
 * The guest test image, made (or found in the cache) once before Nx starts, when a target boots
 * VMs. Without it every VM suite's jest globalSetup ran its own nested `nx run` for the image
 * package: seven Nx start-ups, and their "> nx run" headers in the middle of other tasks' output,
 * which mislabelled failures below.
 */
function testImage() {
  if (process.env.PI_SANDBOX_TEST_IMAGE || !targets.some((target) => target === "test" || target === "test:vm")) {
    return {};
  }
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const result = spawnSync(npm, ["run", "-s", "test-image"], {
    stdio: ["ignore", "pipe", "inherit"],
    encoding: "utf8",
  });
  const dir = result.status === 0 ? result.stdout.trim().split("\n").pop()?.trim() : undefined;
  if (!dir) {
    process.stderr.write(
      `npm test: "npm run -s test-image" failed (${result.error?.message ?? `exit ${result.status}`}); its output above says why\n`,
    );
    process.exit(1);
  }
  return { PI_SANDBOX_TEST_IMAGE: dir };
}

const nx = process.platform === "win32" ? "nx.cmd" : "nx";
const child = spawn(nx, ["run-many", "-t", ...targets, "--outputStyle=static", ...nxArgs], {
  stdio: ["inherit", "pipe", "pipe"],
  env: { ...process.env, ...testImage(), NX_PROFILE: profile },
});

const summary = [];
let project = "";
let detail = 0;
function scan(line) {
  const plain = line.replace(ANSI, "");
  const target = /^> nx run (\S+)/.exec(plain.trim());
  if (target) project = target[1].replaceAll('"', "");
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

/** Each task's duration from Nx's profile (Chrome trace events, µs), slowest first, as report lines. */
function timingLines(file) {
  let events;
  try {
    events = JSON.parse(readFileSync(file, "utf8"));
  } catch {
    return [];
  } finally {
    rmSync(file, { force: true });
  }
  const tasks = events.filter((event) => event.ph === "X");
  if (tasks.length === 0) return [];
  const start = Math.min(...tasks.map((task) => task.ts));
  const minutes = (us) => (us >= 60e6 ? `${(us / 60e6).toFixed(1)} min` : `${Math.round(us / 1e6)} s`).padStart(8);
  return tasks
    .sort((a, b) => b.dur - a.dur)
    .map((task) => {
      const status = task.args?.status && task.args.status !== "success" ? ` (${task.args.status})` : "";
      return `${minutes(task.dur)}  ${task.name}${status}, started at +${minutes(task.ts - start).trim()}`;
    });
}

const code = await new Promise((resolve) => child.on("close", (status, signal) => resolve(status ?? (signal ? 1 : 0))));
const timings = timingLines(profile);
if (timings.length > 0) {
  process.stdout.write(`\nNx task durations, slowest first:\n`);
  for (const line of timings) process.stdout.write(`  ${line}\n`);
}
if (code !== 0 && summary.length > 0) {
  const shown = summary.slice(0, MAX_SUMMARY_LINES);
  process.stdout.write(`\nnpm test failed; what the test runners reported as failing (${summary.length} lines):\n`);
  for (const line of shown) process.stdout.write(`  ${line}\n`);
  if (summary.length > shown.length) process.stdout.write(`  … ${summary.length - shown.length} more lines above\n`);
}
process.exit(code);
