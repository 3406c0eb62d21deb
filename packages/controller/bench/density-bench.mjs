// Density benchmark (run on demand: npm run bench). Ten tiny instances on this host, each with a
// previewed Python web service, measured side by side in one run:
// - running and idle: their QEMUs' total CPU share and RSS, and their daemons', once settled;
// - the dashboard's RSS with the ten running and a page following its live updates;
// - after each suspended itself (`--idle-suspend`) and was parked (its daemon gone, the waker
//   holding its preview): the same totals (no QEMU and no daemon should be left) and the waker's;
// - one preview request to each in turn: its first byte, and how long until it suspended again.
// Set PI_SANDBOX_BENCH_INSTANCES to run fewer (or more) than ten.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction, StateLayout } from "../dist/client/index.js";
import { until, wakersFor } from "../dist/testing.js";
import { cpuPercent, processUsage, qemuResidentMemory, qemuUsage } from "@pi-sandbox/vm/host";
import { benchImage, dashboardRss, median, printRows, row, sleep, webYaml } from "./kit.mjs";

const COUNT = Number(process.env.PI_SANDBOX_BENCH_INSTANCES ?? 10);
const SUSPEND_AFTER_S = 20;
const image = benchImage();
const dir = mkdtempSync(join(tmpdir(), "ctld-"));
const env = { ...process.env, PI_SANDBOX_HOME: join(dir, "state") };
const layout = new StateLayout(env.PI_SANDBOX_HOME);
const names = Array.from({ length: COUNT }, (_, i) => `d${i}`);
const previews = new Map();
const MiB = 2 ** 20;

/** Usage readings of every live QEMU and daemon of the ten (processes that are gone are left out). */
async function readings() {
  const qemu = [];
  const daemons = [];
  for (const name of names) {
    const q = await qemuUsage(layout.diskDir("instances", name));
    if (q) qemu.push([name, q]);
    const view = await callAction({ action: "inspect", name }, { env });
    const d = view.daemonPid ? await processUsage(view.daemonPid) : undefined;
    if (d) daemons.push([view.daemonPid, d]);
  }
  return { qemu: new Map(qemu), daemons: new Map(daemons) };
}

/** Total CPU share and RSS of the processes read both times, over `ms`. */
async function totals(ms) {
  const before = await readings();
  await sleep(ms);
  const after = await readings();
  const sum = (kind) => {
    let cpu = 0;
    let rss = 0;
    for (const [key, usage] of after[kind]) {
      const first = before[kind].get(key);
      if (first) cpu += cpuPercent(first, usage);
      rss += usage.rssBytes / MiB;
    }
    return { cpu, rss, count: after[kind].size };
  };
  return { qemu: sum("qemu"), daemons: sum("daemons") };
}

const suspended = async (name) => (await callAction({ action: "inspect", name }, { env })).idle?.suspended === true;
/** Suspended by its idle clock and parked: its daemon exited, the waker holds its preview. */
const parked = async (name) => {
  const view = await callAction({ action: "inspect", name }, { env });
  return view.idle?.suspended === true && view.daemonPid === undefined;
};

try {
  writeFileSync(join(dir, "web.yaml"), webYaml(image, "dense"));
  for (const name of names) {
    process.stderr.write(`density: creating ${name}\n`);
    const created = await callAction({ action: "create", name, config: "web.yaml" }, { env, cwd: dir });
    previews.set(name, created.previews[0].url);
  }
  const label = `${COUNT} tiny instances`;

  // Running and idle: settled for 60 s, then measured over 60 s.
  await sleep(60_000);
  const running = await totals(60_000);
  if (running.qemu.count !== COUNT) throw new Error(`${running.qemu.count} of ${COUNT} QEMUs are running`);
  row(`${label}, running idle: QEMU CPU, all together`, running.qemu.cpu, undefined, "%", `<= ${1.5 * COUNT}`);
  row(`${label}, running idle: QEMU RSS, all together`, running.qemu.rss, undefined, "MiB", `<= ${400 * COUNT}`);
  let caches = 0;
  for (const name of names) {
    caches += ((await qemuResidentMemory(layout.diskDir("instances", name)))?.translationCacheBytes ?? 0) / MiB;
  }
  row(`${label}, running idle: of that, TCG's translation caches (KVM and HVF have none)`, caches, undefined, "MiB");
  row(`${label}, running idle: daemons' CPU, all together`, running.daemons.cpu, undefined, "%");
  row(`${label}, running idle: daemons' RSS, all together`, running.daemons.rss, undefined, "MiB", `<= ${100 * COUNT}`);
  row(`dashboard RSS: ${label} running, a page open 20 s`, await dashboardRss(env), undefined, "MiB", "<= 80");

  // Each told to suspend itself after SUSPEND_AFTER_S unused; measured once all have.
  for (const name of names) await callAction({ action: "start", name, idleSuspend: `${SUSPEND_AFTER_S}s` }, { env });
  const settled = performance.now();
  for (const name of names) await until(`${name} to suspend itself and be parked`, () => parked(name), 300_000, 250);
  const allSuspendedS = (performance.now() - settled) / 1000;
  const asleep = await totals(30_000);
  const waker = wakersFor(env.PI_SANDBOX_HOME).map((pid) => processUsage(pid));
  const wakerRss = (await Promise.all(waker)).reduce((sum, usage) => sum + (usage?.rssBytes ?? 0) / MiB, 0);
  row(
    `${label}, parked: QEMU processes and daemons left`,
    asleep.qemu.count + asleep.daemons.count,
    undefined,
    "",
    "0",
  );
  row(`${label}, parked: the waker's RSS (one for all)`, wakerRss, undefined, "MiB", `<= ${10 * COUNT}`);
  row(
    `${label}, running idle vs parked: host RSS, all together`,
    asleep.qemu.rss + asleep.daemons.rss + wakerRss,
    running.qemu.rss + running.daemons.rss,
    "MiB",
    "",
    `all ${COUNT} parked ${allSuspendedS.toFixed(0)} s after idle-suspend ${SUSPEND_AFTER_S}s was set`,
  );

  // One request to each preview in turn: it wakes that instance; then it goes back to sleep.
  const firstBytes = [];
  const backToIdle = [];
  for (const name of names) {
    let t = performance.now();
    const res = await fetch(previews.get(name), { signal: AbortSignal.timeout(180_000) });
    const body = await res.text();
    firstBytes.push(performance.now() - t);
    if (res.status !== 200 || body !== "dense\n") throw new Error(`${name}'s woken preview answered ${res.status}`);
    t = performance.now();
    await until(`${name} to suspend itself again`, () => suspended(name), 300_000, 250);
    backToIdle.push(performance.now() - t);
  }
  row(
    `${label}: one preview request to each, woken from auto-suspend: first byte (median)`,
    median(firstBytes),
    undefined,
    "ms",
    "",
    `slowest ${Math.max(...firstBytes).toFixed(0)} ms`,
  );
  row(
    `${label}: after that request, back to suspended (median)`,
    median(backToIdle) / 1000,
    SUSPEND_AFTER_S,
    "s",
    "",
    `baseline: the idle-suspend period; slowest ${(Math.max(...backToIdle) / 1000).toFixed(1)} s`,
  );
} finally {
  await callAction({ action: "dashboard", stop: true }, { env }).catch(() => undefined);
  for (const name of names) await callAction({ action: "stop", name }, { env }).catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
}

printRows();
