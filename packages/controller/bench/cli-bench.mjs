// The warm paths as users run them, through the pi-sandbox CLI binary (a Node process per command,
// the daemon it spawns), beside the library rows of controller-bench.mjs (run on demand: npm run
// bench). Side by side in one run, alternating rounds: `start` of a suspended instance vs of a
// stopped one, to the first preview byte; `create -t` from a template prepared with --suspend vs
// without, and the same create through the library; the first byte of a preview request to a
// parked instance (suspended while unused, its daemon gone, the waker holding its preview) and an
// `exec` on one, against the cold start; and the host memory every process of 4 parked instances
// keeps (RSS and PSS, the waker shared by all), against the daemon one asleep instance kept before
// it was parked. Prints a table and, when PI_SANDBOX_BENCH_OUT is set, appends JSON rows. With
// PI_SANDBOX_TRACE=<file> each timed path is marked in the trace the CLI and daemons write (see
// src/trace.ts); PI_SANDBOX_BENCH_ONLY=targets leaves out the parked rows. With
// PI_SANDBOX_BENCH_BEFORE=<another checkout's packages/controller, built> the target rows run for
// that build too, each build with its own state root, the builds alternating within each round
// (which goes first alternates by round), so a change is measured against its baseline under the
// same load; the parked rows are then left out.
import { spawnSync } from "node:child_process";
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { callAction } from "../dist/client/index.js";
import { daemonsFor, qemuFor, wakersFor } from "../dist/testing.js";
import { benchImage, firstByte, median, printRows, row, rssOf, sleep, webYaml } from "./kit.mjs";

// The command as npm links it (its compile cache on), not dist/cli/main.js.
const CLI = fileURLToPath(new URL("../bin/pi-sandbox.js", import.meta.url));
const ROUNDS = Number(process.env.PI_SANDBOX_BENCH_ROUNDS ?? 2);
const image = benchImage();
const dir = mkdtempSync(join(tmpdir(), "clib-"));
const home = join(dir, "state");
const env = { ...process.env, PI_SANDBOX_HOME: home };
const BEFORE = process.env.PI_SANDBOX_BENCH_BEFORE;

/** Runs a build's `pi-sandbox <args>` as a user does; its stdout, or throws with its stderr. */
function cliOf(bin, buildEnv) {
  return (...args) => {
    const r = spawnSync(process.execPath, [bin, ...args], { env: buildEnv, cwd: dir, encoding: "utf8" });
    if (r.status !== 0) throw new Error(`pi-sandbox ${args.join(" ")}: ${r.stderr}`);
    return r.stdout;
  };
}
const cli = cliOf(CLI, env);
/** The builds measured: this one and, with PI_SANDBOX_BENCH_BEFORE, the baseline, each its own state root. */
const builds = [{ label: BEFORE ? "after: " : "", cli, home, lib: true }];
if (BEFORE) {
  const beforeHome = join(dir, "state-before");
  const bin = join(BEFORE, "bin", "pi-sandbox.js");
  builds.unshift({ label: "before: ", cli: cliOf(bin, { ...env, PI_SANDBOX_HOME: beforeHome }), home: beforeHome });
}
/** The builds in a round's order: which goes first alternates. */
const inOrder = (round) => (round % 2 === 0 ? builds : [...builds].reverse());
/** Waits for `url` to serve the page; one request may wait for a parked instance's wake. */
const warmPage = (url) => firstByte(url, "warm\n", { requestTimeoutMs: 120_000 });
const inspect = (name) => JSON.parse(cli("inspect", name, "--json"));

/** A mark in $PI_SANDBOX_TRACE, beside the CLI's and the daemons'. */
function mark(what) {
  const file = process.env.PI_SANDBOX_TRACE;
  if (file)
    appendFileSync(file, `${(performance.timeOrigin + performance.now()).toFixed(1)} ${process.pid} bench: ${what}\n`);
}

/** Ms of `fn`, marked in the trace as `label`. */
async function timed(label, fn) {
  mark(`${label} begins`);
  const t = performance.now();
  await fn();
  const ms = performance.now() - t;
  mark(`${label} ends (${ms.toFixed(0)} ms)`);
  return ms;
}

/** Waits until `name` is parked: suspended by its idle clock, its daemon gone. */
async function untilParked(name) {
  const deadline = Date.now() + 240_000;
  for (;;) {
    const view = inspect(name);
    if (view.idle?.suspended && view.daemonPid === undefined) return;
    if (Date.now() > deadline) throw new Error(`${name} was never parked (${view.state})`);
    await sleep(1000);
  }
}

/** Resident and proportional memory of `pid` in MiB (/proc/<pid>/smaps_rollup). */
function memoryOf(pid) {
  const text = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
  const kib = (field) => Number(new RegExp(`^${field}:\\s+(\\d+)`, "m").exec(text)[1]);
  return { rss: kib("Rss") / 1024, pss: kib("Pss") / 1024, own: (kib("Private_Dirty") + kib("Private_Clean")) / 1024 };
}

/** The parked rows: a wake by a preview request and by an exec against `cold`, and the memory parked instances keep. */
async function parkedRows(url, cold) {
  // Parked: suspended after 10 s unused, its daemon gone 30 s later; a preview request (then an
  // exec) wakes it. The daemon it kept while asleep, before it was parked, is the memory baseline.
  cli("start", "w", "--idle-suspend", "10s");
  // The daemon an asleep instance keeps until it is parked (before parking, for good): the baseline.
  let asleepDaemon;
  for (const deadline = Date.now() + 240_000; asleepDaemon === undefined && Date.now() < deadline; await sleep(300)) {
    const view = inspect("w");
    if (view.idle?.suspended && view.daemonPid) asleepDaemon = rssOf(view.daemonPid);
  }
  const wakes = [];
  const execs = [];
  for (let round = 0; round < ROUNDS; round++) {
    await untilParked("w");
    wakes.push(await timed("parked wake", () => warmPage(url)));
    await untilParked("w");
    execs.push(await timed("parked exec", () => cli("exec", "w", "--", "true")));
  }
  row(
    "CLI: preview request to a parked instance, first byte vs cold start",
    median(wakes),
    median(cold),
    "ms",
    "<= 0.3",
  );
  row(
    "CLI: exec true on a parked instance vs cold start",
    median(execs),
    median(cold),
    "ms",
    undefined,
    "wakes it first",
  );
  cli("stop", "w");

  // Host memory of 4 parked instances: every process they keep (their daemons and QEMUs: none
  // expected; the waker, shared), per instance.
  const parked = ["p1", "p2", "p3", "p4"];
  for (const name of parked) cli("create", name, "-t", "twarm", "--idle-suspend", "10s");
  for (const name of parked) await untilParked(name);
  const kept = [...qemuFor(home), ...daemonsFor(home), ...wakersFor(home)];
  const total = kept.map(memoryOf).reduce((a, m) => ({ rss: a.rss + m.rss, pss: a.pss + m.pss, own: a.own + m.own }), {
    rss: 0,
    pss: 0,
    own: 0,
  });
  const note = `${kept.length} process(es): ${qemuFor(home).length} QEMU, ${daemonsFor(home).length} daemons, ${wakersFor(home).length} waker; own (private) ${(total.own / 4).toFixed(1)} MiB each`;
  row(
    "4 parked instances: RSS of every process they keep, per instance, vs an asleep daemon before parking",
    total.rss / 4,
    asleepDaemon,
    "MiB",
    "<= 10",
    note,
  );
  row("4 parked instances: PSS of every process they keep, per instance", total.pss / 4, undefined, "MiB", "<= 10");
}

try {
  writeFileSync(join(dir, "web.yaml"), webYaml(image, "warm"));
  for (const b of builds) {
    b.cli("create", "w", "-c", "web.yaml");
    b.url = JSON.parse(b.cli("inspect", "w", "--json")).previews[0].url;
    b.cold = [];
    b.warm = [];
  }
  const url = builds.at(-1).url;

  // Warm vs cold start, each from the CLI to the first preview byte, the same instance.
  for (let round = 0; round < ROUNDS; round++) {
    for (const b of inOrder(round)) {
      b.cli("stop", "w");
      b.cold.push(await timed(`${b.label}cold start`, async () => (b.cli("start", "w"), await warmPage(b.url))));
      b.cli("suspend", "w");
      b.warm.push(await timed(`${b.label}warm start`, async () => (b.cli("start", "w"), await warmPage(b.url))));
    }
  }
  for (const b of builds)
    row(
      `${b.label}CLI: start to first preview byte, after suspend vs after stop`,
      median(b.warm),
      median(b.cold),
      "ms",
      "<= 0.2",
    );
  const cold = builds.at(-1).cold;

  // Warm clones through the CLI, and the same create through the library (this build's).
  for (const b of builds) {
    b.cli("stop", "w");
    b.cli("prepare", "tcold", "-c", "web.yaml");
    b.cli("prepare", "twarm", "-c", "web.yaml", "--suspend");
    b.fromCold = [];
    b.fromWarm = [];
    b.fromWarmLib = [];
  }
  for (let round = 0; round < ROUNDS; round++) {
    for (const b of inOrder(round)) {
      const ways = [
        ["tcold", b.fromCold, "cli"],
        ["twarm", b.fromWarm, "cli"],
      ];
      if (b.lib) ways.push(["twarm", b.fromWarmLib, "lib"]);
      for (const [template, samples, how] of ways) {
        const name = `${template}-${how}-${round}`;
        samples.push(
          // The preview's address from the create's own answer, as a user reads it: not from
          // another command (an inspect is a CLI process more on the way to the first byte).
          await timed(`${b.label}create -t ${template} (${how})`, async () => {
            const view =
              how === "cli"
                ? JSON.parse(b.cli("create", name, "-t", template, "--json"))
                : await callAction({ action: "create", name, template }, { env });
            await warmPage(view.previews[0].url);
          }),
        );
        b.cli("destroy", name, "-f");
      }
    }
  }
  for (const b of builds)
    row(
      `${b.label}CLI: create -t to first preview byte, template prepared with --suspend vs without`,
      median(b.fromWarm),
      median(b.fromCold),
      "ms",
      "<= 0.25",
    );
  const { fromWarm, fromWarmLib } = builds.at(-1);
  row(
    "create -t from a suspended template to first preview byte: CLI vs library",
    median(fromWarm),
    median(fromWarmLib),
    "ms",
  );

  if (process.env.PI_SANDBOX_BENCH_ONLY !== "targets" && !BEFORE) await parkedRows(url, cold);
} finally {
  for (const name of ["w", "p1", "p2", "p3", "p4"])
    await callAction({ action: "stop", name }, { env }).catch(() => undefined);
  if (BEFORE) {
    try {
      builds[0].cli("stop", "w");
    } catch {
      // Not running, or never made.
    }
  }
  const left = () => builds.flatMap((b) => [...daemonsFor(b.home), ...wakersFor(b.home)]);
  const deadline = Date.now() + 30_000;
  while (left().length > 0 && Date.now() < deadline) await sleep(500);
  rmSync(dir, { recursive: true, force: true });
}

printRows();
