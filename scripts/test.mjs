// `npm test`: lint, test and build every project through Nx, and when something fails, end with a
// short summary of what failed (the full run prints tens of thousands of lines; an early failure
// scrolls out of a CI log's tail long before the end). At the end it lists how long each task
// took, slowest first, so the slowest suite shows in every log.
//
// The default run schedules the `test` targets itself, longest first. Nx orders ready tasks by
// how many projects depend on theirs, so the leaf projects' suites, which are the longest
// (review-setup's in-guest refresh, e2e), started last and ran alone at the end: minutes of one
// idle core. Here, after `nx run-many -t build`, a pool as wide as Nx's `parallel` runs each
// project's `test` (then one `lint` run) in the order of the last run's durations, or of
// DEFAULT_ORDER on a fresh clone. Each task's output is printed in one piece when it ends.
//
// Before the tests it makes or finds the guest test image once for every VM suite.
// `--targets=a,b` runs those targets instead (the root `npm run test:unit` uses it), and any other
// argument goes to Nx; both take one plain `nx run-many`, Nx ordering the tasks.
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline";

const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;
// Jest's failing suite and test headers (with the first lines of what went wrong under each),
// TypeScript and ESLint errors, pytest's failed tests.
const FAIL_LINE = /^\s*(FAIL |● (?!Console)|>\s+\d+ \||\d+:\d+\s+error\s)|error TS\d+|^FAILED /;
const DETAIL_LINES = 6;
const MAX_SUMMARY_LINES = 200;
/** Longest suites first, as measured on a clean-clone CI run; used until a run has recorded its own. */
const DEFAULT_ORDER = ["review-setup", "controller", "e2e", "vm", "supervisor", "pi-extension", "ingress"];
const DURATIONS_FILE = ".nx/test-durations.json";

const targetsArg = process.argv.slice(2).find((arg) => arg.startsWith("--targets="));
const targets = targetsArg ? targetsArg.slice("--targets=".length).split(",") : ["lint", "test", "build"];
const nxArgs = process.argv.slice(2).filter((arg) => arg !== targetsArg);
const scheduled = !targetsArg && nxArgs.length === 0;
const nx = process.platform === "win32" ? "nx.cmd" : "nx";

const summary = [];
const timings = [];
const runStart = Date.now();

/**
 * The guest test image, made (or found in the cache) once, when a target boots VMs. Without it
 * every VM suite's jest globalSetup ran its own nested `nx run` for the image package: seven Nx
 * start-ups, and their "> nx run" headers inside other tasks' output.
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

/**
 * A summary collector: failure lines of one task's output, tagged with the task's name, or in a
 * plain `nx run-many` with the project of the last "> nx run" header.
 */
function scanner(task) {
  let detail = 0;
  let tag = task;
  return (line) => {
    const plain = line.replace(ANSI, "");
    const header = /^> nx run (\S+)/.exec(plain.trim());
    if (header && task === undefined) tag = header[1].replaceAll('"', "");
    if (FAIL_LINE.test(plain)) {
      summary.push(`[${tag}] ${plain.trim()}`);
      detail = plain.includes("●") ? DETAIL_LINES : 0;
    } else if (detail > 0 && plain.trim()) {
      summary.push(`[${tag}]     ${plain.trim()}`);
      detail--;
    }
  };
}

/**
 * Runs one Nx command. `live` streams its output as it comes (the only command running);
 * otherwise the output is kept and printed in one piece when it ends, so two tasks' lines never
 * interleave. Resolves with the exit code.
 */
function runNx(task, args, env, live) {
  const started = Date.now();
  const child = spawn(nx, [...args, "--outputStyle=static"], { stdio: ["ignore", "pipe", "pipe"], env });
  const kept = [];
  const scan = scanner(live && !scheduled ? undefined : task);
  for (const [stream, out] of [
    [child.stdout, process.stdout],
    [child.stderr, process.stderr],
  ]) {
    createInterface({ input: stream, crlfDelay: Infinity }).on("line", (line) => {
      if (live) out.write(line + "\n");
      else kept.push(line);
      scan(line);
    });
  }
  if (!live) process.stdout.write(`npm test: ${task} started at +${minutes(started - runStart)}\n`);
  const flush = () => kept.splice(0).forEach((line) => process.stdout.write(line + "\n"));
  running.set(child, flush);
  return new Promise((resolve) => {
    child.on("close", (status, signal) => {
      running.delete(child);
      flush();
      const code = status ?? (signal ? 1 : 0);
      const duration = Date.now() - started;
      timings.push({ task, duration, started: started - runStart, failed: code !== 0 });
      if (!live)
        process.stdout.write(`npm test: ${task} ${code === 0 ? "passed" : "FAILED"} in ${minutes(duration)}\n`);
      resolve(code);
    });
  });
}

/** Running Nx commands and how to print what each has kept so far. */
const running = new Map();
// An interrupted or timed-out CI run must still show what the running tasks printed.
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.once(signal, () => {
    for (const [child, flush] of running) {
      flush();
      child.kill(signal);
    }
    process.exit(130);
  });
}

function minutes(ms) {
  return ms >= 60_000 ? `${(ms / 60_000).toFixed(1)} min` : `${Math.round(ms / 1000)} s`;
}

/** Projects with a `test` target, longest first by the last run's durations, else DEFAULT_ORDER. */
function testProjectsLongestFirst() {
  const listed = spawnSync(nx, ["show", "projects", "--with-target", "test", "--json"], { encoding: "utf8" });
  if (listed.status !== 0) throw new Error(`nx show projects failed: ${listed.stderr}`);
  const projects = JSON.parse(listed.stdout);
  let last = {};
  try {
    last = JSON.parse(readFileSync(DURATIONS_FILE, "utf8"));
  } catch {
    // No earlier run here: DEFAULT_ORDER.
  }
  const rank = (project) => {
    const known = DEFAULT_ORDER.indexOf(project.replace(/^@pi-sandbox\//, ""));
    return known === -1 ? DEFAULT_ORDER.length : known;
  };
  return projects.sort((a, b) => (last[b] ?? 0) - (last[a] ?? 0) || rank(a) - rank(b));
}

/** Runs the jobs `width` at a time, in order; resolves with the worst exit code. */
async function pool(jobs, width) {
  let worst = 0;
  const queue = [...jobs];
  const worker = async () => {
    for (let job = queue.shift(); job; job = queue.shift()) {
      const code = await job();
      worst = Math.max(worst, code);
    }
  };
  await Promise.all(Array.from({ length: width }, worker));
  return worst;
}

async function scheduledRun(env) {
  const built = await runNx("build", ["run-many", "-t", "build"], env, true);
  if (built !== 0) return built;
  const width = JSON.parse(readFileSync("nx.json", "utf8")).parallel ?? 2;
  const projects = testProjectsLongestFirst();
  const jobs = projects.map((project) => () => runNx(`${project}:test`, ["run", `${project}:test`], env, false));
  jobs.push(() => runNx("lint", ["run-many", "-t", "lint", "--parallel=1"], env, false));
  const code = await pool(jobs, width);
  const durations = Object.fromEntries(
    timings.filter((t) => t.task.endsWith(":test")).map((t) => [t.task.slice(0, -":test".length), t.duration]),
  );
  mkdirSync(".nx", { recursive: true });
  writeFileSync(DURATIONS_FILE, JSON.stringify(durations, null, 2) + "\n");
  return code;
}

const env = { ...process.env, ...testImage() };
const code = scheduled
  ? await scheduledRun(env)
  : await runNx(targets.join(","), ["run-many", "-t", ...targets, ...nxArgs], env, true);

if (timings.length > 1) {
  process.stdout.write(`\nTask durations, slowest first (whole run ${minutes(Date.now() - runStart)}):\n`);
  for (const t of [...timings].sort((a, b) => b.duration - a.duration)) {
    const line = `${minutes(t.duration).padStart(8)}  ${t.task}${t.failed ? " (failure)" : ""}, started at +${minutes(t.started)}`;
    process.stdout.write(`  ${line}\n`);
  }
}
if (code !== 0 && summary.length > 0) {
  const shown = summary.slice(0, MAX_SUMMARY_LINES);
  process.stdout.write(`\nnpm test failed; what the test runners reported as failing (${summary.length} lines):\n`);
  for (const line of shown) process.stdout.write(`  ${line}\n`);
  if (summary.length > shown.length) process.stdout.write(`  … ${summary.length - shown.length} more lines above\n`);
}
process.exit(code);
