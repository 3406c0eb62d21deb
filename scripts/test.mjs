// `npm test`: lint, test and build every project through Nx, and when something fails, end with a
// short summary of what failed (the full run prints tens of thousands of lines; an early failure
// scrolls out of a CI log's tail long before the end). At the end it lists how long each task
// took, slowest first, so the slowest suite shows in every log.
//
// The default run schedules the test jobs itself, longest first. Nx orders ready tasks by how many
// projects depend on theirs, so the leaf projects' suites, which are the longest (e2e,
// review-setup), started last and ran alone at the end: minutes of one idle core. Here, after
// `nx run-many -t build`, a pool as wide as Nx's `parallel` runs the jobs in the order of the last
// run's durations, or of DEFAULT_MINUTES on a fresh clone (CI). A job is one of a project's
// test:agent, test:unit and test:vm where its `test` runs just those (`npm run -s test:unit && npm
// run -s test:vm`), else its `test`; `lint` is a job like the others. Jobs that small let the two
// lanes end together: with whole projects, controller's unit and VM suites (19 min) and vm's (10)
// shared one lane, and lint (1-2 min) ran alone after both. Each job's output is printed in one
// piece when it ends.
//
// Before the tests it makes or finds the guest test image once for every VM suite.
// `--targets=a,b` runs those targets instead (the root `npm run test:unit` uses it), and any other
// argument goes to Nx; both take one plain `nx run-many`, Nx ordering the tasks.
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline";

const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;
// Jest's failing suite and test headers (with the first lines of what went wrong under each),
// TypeScript and ESLint errors, pytest's failed tests.
const FAIL_LINE = /^\s*(FAIL |● (?!Console)|>\s+\d+ \||\d+:\d+\s+error\s)|error TS\d+|^FAILED /;
const DETAIL_LINES = 6;
const MAX_SUMMARY_LINES = 200;
/**
 * Minutes each job took on a clean-clone CI rehearsal (projects without their scope; `npm test`
 * took 28.8 min), less the estimated savings of the test cuts made after it in e2e
 * (kill-during-stop's 10 trials, faults, scale, exec-handles on faults' instance), vm (stop-crash),
 * review-setup and controller (lifecycle's warm clones): the order until a run has recorded its own
 * durations. A job missing here counts as 1 minute.
 */
const DEFAULT_MINUTES = {
  "controller:test:vm": 13.9,
  "e2e:test": 10.5,
  "vm:test:vm": 9.7,
  "review-setup:test:vm": 5.5,
  "pi-extension:test:vm": 3.2,
  "controller:test:unit": 2.7,
  "supervisor:test:vm": 2.2,
  "ingress:test:unit": 1.2,
  "supervisor:test:unit": 0.9,
  "vm:test:unit": 0.8,
  "pi-extension:test:unit": 0.6,
  "ingress:test:vm": 0.6,
  "supervisor:test:agent": 0.3,
  lint: 0.3,
  "review-setup:test:unit": 0.2,
  "config:test:unit": 0.1,
  "image:test:unit": 0.1,
};
const DURATIONS_FILE = ".nx/test-durations.json";
/** How long one task may run (the longest takes about 14 min on CI); PI_SANDBOX_TEST_TASK_MINUTES overrides. */
const TASK_LIMIT_MS = Number(process.env.PI_SANDBOX_TEST_TASK_MINUTES ?? 35) * 60_000;
/** Set in each task's environment, to name the processes a task left behind. */
const TASK_MARK = "PI_SANDBOX_TEST_TASK";
/** How often the still-running tasks are listed. */
const HEARTBEAT_MS = 5 * 60_000;

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
  // Its own process group, so that a timeout ends Nx together with the test runner under it.
  // A kept task's output is streamed to this process as it comes (Nx's static style holds a
  // task's output until it ends), so that a task ended by its limit still shows what it printed.
  const style = live ? "static" : "stream-without-prefixes";
  const child = spawn(nx, [...args, `--outputStyle=${style}`], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...env, [TASK_MARK]: task },
    detached: true,
  });
  const kept = [];
  // What the heartbeat, a timeout and a signal need of it; lastLine is its last non-empty line.
  const entry = {
    task,
    started,
    live,
    lastLine: "none",
    flush: () => kept.splice(0).forEach((line) => process.stdout.write(line + "\n")),
  };
  const scan = scanner(live && !scheduled ? undefined : task);
  for (const [stream, out] of [
    [child.stdout, process.stdout],
    [child.stderr, process.stderr],
  ]) {
    createInterface({ input: stream, crlfDelay: Infinity }).on("line", (line) => {
      if (live) out.write(line + "\n");
      else kept.push(line);
      if (line.trim()) entry.lastLine = line.replace(ANSI, "").trim();
      scan(line);
    });
  }
  if (!live) process.stdout.write(`npm test: ${task} started at +${minutes(started - runStart)}\n`);
  running.set(child, entry);
  // A streamed command shows where it stands; a kept one gets a limit and a heartbeat.
  const deadline = live ? undefined : setTimeout(() => timeOut(child, entry), TASK_LIMIT_MS);
  return new Promise((resolve) => {
    // "close" waits for every holder of the output pipes: a stray process that inherited them
    // (a leaked daemon or VM) would keep the task open after Nx exited. Nx's exit is the end.
    child.on("exit", () => {
      setTimeout(() => {
        if (!running.has(child)) return;
        process.stdout.write(
          `npm test: ${task}: processes it left behind keep its output open; not waiting for them. Still running:\n${leftBehind(task)}\n`,
        );
        child.stdout.destroy();
        child.stderr.destroy();
        child.emit("close", child.exitCode, child.signalCode);
      }, 10_000).unref();
    });
    child.once("close", (status, signal) => {
      clearTimeout(deadline);
      running.delete(child);
      entry.flush();
      const code = status ?? (signal ? 1 : 0);
      const duration = Date.now() - started;
      timings.push({ task, duration, started: started - runStart, failed: code !== 0 });
      if (!live)
        process.stdout.write(`npm test: ${task} ${code === 0 ? "passed" : "FAILED"} in ${minutes(duration)}\n`);
      resolve(code);
    });
  });
}

/** Running Nx commands: their task, start time, last line and how to print what each has kept so far. */
const running = new Map();

/** Processes (pid and command line) that inherited `task`'s TASK_MARK, other than this one. */
function leftBehind(task) {
  const found = [];
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name) && Number(name) !== process.pid)) {
    try {
      if (!readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").includes(`${TASK_MARK}=${task}`)) continue;
      found.push(`  ${pid} ${readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ").slice(0, 200)}`);
    } catch {
      // Gone, not ours to read, or no /proc (not Linux).
    }
  }
  return found.join("\n") || "  (none found)";
}

/** Signals a command's whole process group (Nx, npm, the test runner); it may be gone already. */
function killGroup(child, signal) {
  try {
    process.kill(-child.pid, signal);
  } catch {
    // Already exited.
  }
}

/**
 * A task past TASK_LIMIT_MS: its output so far is printed (the files that finished), then it is
 * ended and counts as failed. A hung suite otherwise printed nothing until CI's own limit killed
 * the run, and the log did not say which task had hung.
 */
function timeOut(child, { task, lastLine, flush }) {
  // Nx already exited: only its left-behind processes hold the task open, and "exit" ends it.
  if (child.exitCode !== null || child.signalCode !== null) return;
  flush();
  const line = `npm test: ${task} TIMED OUT after ${minutes(TASK_LIMIT_MS)} (its last line: ${lastLine}); ending it`;
  process.stdout.write(line + "\n");
  summary.push(`[${task}] ${line.slice("npm test: ".length)}`);
  killGroup(child, "SIGTERM");
  setTimeout(() => killGroup(child, "SIGKILL"), 15_000).unref();
}

// Every few minutes, which tasks are still running and what each printed last.
setInterval(() => {
  for (const { task, started, live, lastLine } of running.values()) {
    if (!live)
      process.stdout.write(
        `npm test: ${task} still running after ${minutes(Date.now() - started)}; last line: ${lastLine}\n`,
      );
  }
}, HEARTBEAT_MS).unref();

// An interrupted or timed-out CI run must still show what the running tasks printed.
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.once(signal, () => {
    for (const [child, { flush }] of running) {
      flush();
      killGroup(child, signal);
    }
    process.exit(130);
  });
}

function minutes(ms) {
  return ms >= 60_000 ? `${(ms / 60_000).toFixed(1)} min` : `${Math.round(ms / 1000)} s`;
}

/**
 * Each project's test scripts that its `test` script runs in turn and nothing else
 * (`npm run -s test:unit && npm run -s test:vm`), by project; a project whose `test` does more is
 * missing. Projects are the root package.json's workspaces, named as Nx names them (`nx.name`,
 * else the package name).
 */
function testParts() {
  const parts = new Map();
  const workspaces = JSON.parse(readFileSync("package.json", "utf8")).workspaces ?? [];
  const dirs = workspaces.flatMap((pattern) =>
    pattern.endsWith("/*")
      ? readdirSync(pattern.slice(0, -2), { withFileTypes: true })
          .filter((entry) => entry.isDirectory())
          .map((entry) => `${pattern.slice(0, -2)}/${entry.name}`)
      : [pattern],
  );
  for (const dir of dirs) {
    let pkg;
    try {
      pkg = JSON.parse(readFileSync(`${dir}/package.json`, "utf8"));
    } catch {
      continue;
    }
    const steps = (pkg.scripts?.test ?? "")
      .split("&&")
      .map((step) => /^\s*npm run -s (test:[\w-]+)\s*$/.exec(step)?.[1]);
    if (steps.length > 0 && steps.every((step) => step && pkg.scripts[step]))
      parts.set(pkg.nx?.name ?? pkg.name, steps);
  }
  return parts;
}

/** The test jobs and lint, longest first by the last run's durations, else by DEFAULT_MINUTES. */
function jobsLongestFirst() {
  const listed = spawnSync(nx, ["show", "projects", "--with-target", "test", "--json"], { encoding: "utf8" });
  if (listed.status !== 0) throw new Error(`nx show projects failed: ${listed.stderr}`);
  const parts = testParts();
  const jobs = JSON.parse(listed.stdout).flatMap((project) =>
    (parts.get(project) ?? ["test"]).map((target) => ({
      task: `${project}:${target}`,
      args: ["run-many", "-t", target, "-p", project],
    })),
  );
  jobs.push({ task: "lint", args: ["run-many", "-t", "lint", "--parallel=1"] });
  let last = {};
  try {
    last = JSON.parse(readFileSync(DURATIONS_FILE, "utf8"));
  } catch {
    // No earlier run here: DEFAULT_MINUTES.
  }
  const expected = ({ task }) => last[task] ?? (DEFAULT_MINUTES[task.replace(/^@pi-sandbox\//, "")] ?? 1) * 60_000;
  return jobs.sort((a, b) => expected(b) - expected(a));
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
  const jobs = jobsLongestFirst();
  // Everything is built now. Without --excludeTaskDependencies each `nx run` would take its builds
  // again "from the local cache": with no Nx daemon (CI) that rewrites their dist/ folders, and a
  // suite running in the other lane failed once importing a package whose dist/ was gone.
  // The same goes for the packs tests make (npm pack runs scripts/prepack.mjs): this tells them
  // that every project is built.
  const builtEnv = { ...env, PI_SANDBOX_WORKSPACE_BUILT: "1" };
  const code = await pool(
    jobs.map(
      ({ task, args }) =>
        () =>
          runNx(task, [...args, "--excludeTaskDependencies"], builtEnv, false),
    ),
    width,
  );
  const durations = Object.fromEntries(timings.filter((t) => t.task !== "build").map((t) => [t.task, t.duration]));
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
