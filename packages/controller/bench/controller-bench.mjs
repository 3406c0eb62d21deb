// Controller benchmark (run on demand: npm run bench). Measures, side by side in one run:
// inspect and `exec true` through the CLI and through ./client vs the in-process library call, an
// upload as the model (through the model guard) vs as the user,
// `list` over 50 stopped instance records, the daemon's and the dashboard's RSS (QEMU excluded), an
// idle instance's QEMU CPU share and RSS, and a warm start:
// start to the first preview byte after `suspend` vs after `stop`, same instance; and the first byte
// of a preview request that wakes the instance after it suspended itself (`idle`), against that;
// and `create -t` to the first preview byte from a template prepared with suspend vs without; and,
// from the instances' logs, how long their guest agent took to come up after the guest was ready,
// on a create and on a start after stop; and what automatic checkpoints cost a guest that writes
// steadily (checkpoint-part.mjs). PI_SANDBOX_BENCH_ONLY=checkpoint runs only that part (~10 min);
// PI_SANDBOX_BENCH_ONLY=guard only the model guard's row (one boot).
// Prints a table and, when PI_SANDBOX_BENCH_OUT is set, appends JSON rows for the summary.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { callAction, StateLayout } from "../dist/client/index.js";
import { inspectEntry, listEntries } from "../dist/state/inspect.js";
import { writeRecord, writeStatus } from "../dist/state/records.js";
import { parseConfig } from "@pi-sandbox/config";
import { cpuPercent, qemuResidentMemory, qemuUsage } from "@pi-sandbox/vm/host";
import { checkpointRows } from "./checkpoint-part.mjs";
import {
  agentUpDelays,
  benchImage,
  firstByte,
  dashboardRss,
  median,
  printRows,
  row,
  rssOf,
  sleep,
  time,
  webYaml,
} from "./kit.mjs";

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
const image = benchImage();
const dir = mkdtempSync(join(tmpdir(), "ctlb-"));
const env = { ...process.env, PI_SANDBOX_HOME: join(dir, "state") };

const cli = (...args) => {
  const r = spawnSync(process.execPath, [CLI, ...args], { env, encoding: "utf8" });
  if (r.status !== 0) throw new Error(r.stderr);
};

/** The model guard (marks, symlinks resolved, protected places, concerns) on a call it allows. */
async function guardRow() {
  const upload = (caller) => () =>
    callAction(
      { action: "upload", name: "bench", from: "sandbox.yaml", to: "/tmp/up.yaml" },
      { env, cwd: dir, caller },
    );
  // Alternating rounds, so a drift of the host's speed reaches both sides alike.
  const user = [];
  const model = [];
  for (let i = 0; i < 5; i++) {
    user.push(await time(5, upload("user")));
    model.push(await time(5, upload("model")));
  }
  row("upload of a project file: as the model (guarded) vs as the user", median(model), median(user), "ms", "~1");
}

if (process.env.PI_SANDBOX_BENCH_ONLY === "guard") {
  try {
    writeFileSync(join(dir, "sandbox.yaml"), `version: 1\nprofile: tiny\ndiskGiB: 4\nimage: ${image}\n`);
    await callAction({ action: "create", name: "bench", config: "sandbox.yaml" }, { env, cwd: dir });
    await guardRow();
  } finally {
    await callAction({ action: "stop", name: "bench" }, { env }).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
  printRows();
  process.exit(0);
}

if (process.env.PI_SANDBOX_BENCH_ONLY === "checkpoint") {
  try {
    await checkpointRows({ env, dir, image });
  } finally {
    for (const name of ["ckoff", "ck30"]) await callAction({ action: "stop", name }, { env }).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
  printRows();
  process.exit(0);
}

try {
  writeFileSync(join(dir, "sandbox.yaml"), `version: 1\nprofile: tiny\ndiskGiB: 4\nimage: ${image}\n`);
  const layout = new StateLayout(env.PI_SANDBOX_HOME);
  await layout.ensurePrivate();
  const config = parseConfig("version: 1\n");
  for (let i = 0; i < 50; i++) {
    const name = `rec-${i}`;
    mkdirSync(layout.entryDir("instances", name), { recursive: true });
    await writeRecord(layout, { kind: "instances", name, createdAt: new Date().toISOString(), config });
    await writeStatus(layout, "instances", name, { state: "stopped", updatedAt: new Date().toISOString() });
  }
  const listLib = await time(20, () => listEntries(layout, "instances"));
  const listClient = await time(20, () => callAction({ action: "list" }, { env }));
  const listCli = await time(10, () => cli("list", "--json"));
  row("list, 50 stopped records: ./client vs library", listClient, listLib, "ms");
  row("list, 50 stopped records: CLI vs library", listCli, listLib, "ms", undefined, "CLI includes Node start-up");

  const created = await callAction({ action: "create", name: "bench", config: "sandbox.yaml" }, { env, cwd: dir });
  const inspectLib = await time(20, () => inspectEntry(layout, "instances", "bench"));
  const inspectClient = await time(20, () => callAction({ action: "inspect", name: "bench" }, { env }));
  const inspectCli = await time(10, () => cli("inspect", "bench", "--json"));
  row("inspect: ./client vs library", inspectClient, inspectLib, "ms");
  row("inspect: CLI vs library", inspectCli, inspectLib, "ms", undefined, "CLI includes Node start-up");

  const execClient = await time(15, () => callAction({ action: "exec", name: "bench", cmd: "true" }, { env }));
  const execCli = await time(8, () => cli("exec", "bench", "--", "true"));
  row("exec true: CLI vs ./client", execCli, execClient, "ms", undefined, "daemon + agent round trip in both");
  await guardRow();

  row("daemon RSS (QEMU excluded)", rssOf(created.daemonPid), undefined, "MiB", "<= 100");
  row("dashboard RSS: 51 instances (1 running), a page open 20 s", await dashboardRss(env), undefined, "MiB", "<= 80");
  await callAction({ action: "stop", name: "bench" }, { env });

  // Warm start: the demo's Python server as a previewed service; each round stops (cold start
  // next) and suspends (warm start next) the same instance, timing start to the first preview byte.
  writeFileSync(join(dir, "web.yaml"), webYaml(image, "warm"));
  const web = await callAction({ action: "create", name: "warm", config: "web.yaml" }, { env, cwd: dir });
  const url = web.previews[0].url;

  // Idle cost: the new instance left alone (its web service running, no request) from 60 s after
  // create, measured over 60 s: its QEMU's CPU share and resident memory.
  const warmDisk = new StateLayout(env.PI_SANDBOX_HOME).diskDir("instances", "warm");
  await sleep(60_000);
  const idleBefore = await qemuUsage(warmDisk);
  await sleep(60_000);
  const idleAfter = await qemuUsage(warmDisk);
  if (!idleBefore || !idleAfter) throw new Error("warm's QEMU is not running");
  row(
    "idle instance (tiny, one web service): QEMU CPU over 60 s, 60 s after create",
    cpuPercent(idleBefore, idleAfter),
    undefined,
    "%",
    "<= 1.5",
  );
  row("idle instance (tiny, one web service): QEMU RSS", idleAfter.rssBytes / 2 ** 20, undefined, "MiB", "<= 400");
  // Where that memory is, read right after (inspect prints the same).
  const parts = await qemuResidentMemory(warmDisk);
  if (!parts) throw new Error("warm's QEMU is not running");
  row("idle instance: of its QEMU RSS, the guest's RAM", parts.guestBytes / 2 ** 20, undefined, "MiB");
  row(
    "idle instance: of its QEMU RSS, TCG's translation cache (KVM and HVF have none)",
    parts.translationCacheBytes / 2 ** 20,
    undefined,
    "MiB",
  );
  row("idle instance: of its QEMU RSS, QEMU itself", parts.otherBytes / 2 ** 20, undefined, "MiB");
  const warmPage = (target = url) => firstByte(target, "warm\n");

  const cold = [];
  const warm = [];
  const stops = [];
  const suspends = [];
  const restores = [];
  for (let round = 0; round < 2; round++) {
    let t = performance.now();
    await callAction({ action: "stop", name: "warm" }, { env });
    stops.push(performance.now() - t);
    t = performance.now();
    await callAction({ action: "start", name: "warm" }, { env });
    await warmPage();
    cold.push(performance.now() - t);
    t = performance.now();
    await callAction({ action: "suspend", name: "warm" }, { env });
    suspends.push(performance.now() - t);
    t = performance.now();
    const started = await callAction({ action: "start", name: "warm" }, { env });
    await warmPage();
    warm.push(performance.now() - t);
    restores.push(started.restore?.warm === true ? "warm" : `cold (${started.restore?.reason ?? "no restore"})`);
  }
  row(
    "start to first preview byte: after suspend vs after stop (median of 2)",
    median(warm),
    median(cold),
    "ms",
    "<= 0.25",
    `starts after suspend: ${restores.join(", ")}`,
  );
  row("suspend vs stop (median of 2)", median(suspends), median(stops), "ms");
  // The guest agent on the boots of both instances above: their creates (new disks: started from the
  // seed) and the warm instance's two starts after stop; warm starts attach to the running agent and
  // are not counted.
  const [onCreate, ...onStart] = agentUpDelays(join(env.PI_SANDBOX_HOME, "instances", "warm", "controller.log"));
  const [onFirstCreate] = agentUpDelays(join(env.PI_SANDBOX_HOME, "instances", "bench", "controller.log"));
  const creates = [onFirstCreate, onCreate];
  row(
    "agent up after guest ready: create, a new disk (median of 2)",
    median(creates),
    undefined,
    "ms",
    "<= 1500",
    `creates: ${creates.map(Math.round).join(", ")} ms`,
  );
  row(
    "agent up after guest ready: start after stop (median of 2)",
    median(onStart),
    undefined,
    "ms",
    "<= 1500",
    `starts: ${onStart.map(Math.round).join(", ")} ms`,
  );

  // Auto-suspend: the same instance, told to suspend itself after 10 s unused, then one preview
  // request wakes it; that request's first byte against the cold start to first byte above.
  await callAction({ action: "start", name: "warm", idleSuspend: "10s" }, { env });
  const wakes = [];
  for (let round = 0; round < 2; round++) {
    const deadline = Date.now() + 180_000;
    while (!(await callAction({ action: "inspect", name: "warm" }, { env })).idle?.suspended) {
      if (Date.now() > deadline) throw new Error("warm never suspended itself");
      await sleep(500);
    }
    const t = performance.now();
    const res = await fetch(url, { signal: AbortSignal.timeout(180_000) });
    wakes.push(performance.now() - t);
    if (res.status !== 200 || (await res.text()) !== "warm\n")
      throw new Error(`the woken preview answered ${res.status}`);
  }
  row(
    "preview request to an auto-suspended instance: first byte vs cold start to first byte (median of 2)",
    median(wakes),
    median(cold),
    "ms",
    "<= 0.3",
  );
  await callAction({ action: "stop", name: "warm" }, { env });

  // Warm clones: create -t to the first preview byte, from the same config prepared with suspend
  // (its guest saved running) and without (a cold boot of the prepared disk).
  await callAction({ action: "prepare", name: "tcold", config: "web.yaml" }, { env, cwd: dir });
  await callAction({ action: "prepare", name: "twarm", config: "web.yaml", suspend: true }, { env, cwd: dir });
  const fromCold = [];
  const fromWarm = [];
  for (let round = 0; round < 2; round++) {
    for (const [template, samples] of [
      ["tcold", fromCold],
      ["twarm", fromWarm],
    ]) {
      const name = `${template}-${round}`;
      const t = performance.now();
      const clone = await callAction({ action: "create", name, template }, { env });
      await warmPage(clone.previews[0].url);
      samples.push(performance.now() - t);
      await callAction({ action: "destroy", name, confirm: name }, { env });
    }
  }
  row(
    "create -t to first preview byte: template prepared with suspend vs without (median of 2)",
    median(fromWarm),
    median(fromCold),
    "ms",
    "<= 0.25",
  );

  await checkpointRows({ env, dir, image });
} finally {
  await callAction({ action: "dashboard", stop: true }, { env }).catch(() => undefined);
  await callAction({ action: "stop", name: "bench" }, { env }).catch(() => undefined);
  await callAction({ action: "stop", name: "warm" }, { env }).catch(() => undefined);
  for (const name of ["ckoff", "ck30"]) await callAction({ action: "stop", name }, { env }).catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
}

printRows();
