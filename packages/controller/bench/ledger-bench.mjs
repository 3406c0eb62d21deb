// What the ledger costs (#47's target: within 3 %), side by side in one run on one instance: its
// daemon is started with PI_SANDBOX_BENCH_NO_LEDGER=toggle (a bench-only switch), writes its ledger
// until a SIGUSR2 turns it off and the next on again, so `exec true` through the library (an
// action entry and an exec entry each) and a small preview GET (preview traffic is summed per
// minute, so nothing per request) are timed in pairs with and without it, the order alternating,
// and a drift of the host's speed reaches both sides alike. The ledger's exec entries are counted
// after: exactly those of the calls timed with it. And what one append costs on its own (hash,
// JSON line, appendFileSync: no fsync). Prints a table and, when PI_SANDBOX_BENCH_OUT is set,
// appends JSON rows.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction } from "../dist/client/index.js";
import { Ledger } from "../dist/state/ledger.js";
import { benchImage, median, printRows, row, sleep, webYaml } from "./kit.mjs";

const PAIRS = Number(process.env.PI_SANDBOX_BENCH_PAIRS ?? 300);
const image = benchImage();
const dir = mkdtempSync(join(tmpdir(), "ledb-"));
const env = { ...process.env, PI_SANDBOX_HOME: join(dir, "state"), PI_SANDBOX_BENCH_NO_LEDGER: "toggle" };

/** Ms of `fn`. */
async function timed(fn) {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

/** A GET of `url` to the last byte; throws unless it is the page. */
async function get(url) {
  const res = await fetch(url);
  if ((await res.text()) !== "small\n") throw new Error(`${url} answered ${res.status}`);
}

try {
  writeFileSync(join(dir, "web.yaml"), webYaml(image, "small"));
  const created = await callAction({ action: "create", name: "w", config: "web.yaml" }, { env, cwd: dir });
  const url = created.previews[0].url;
  const pid = (await callAction({ action: "inspect", name: "w" }, { env })).daemonPid;
  let on = true;
  let timedOn = 0;
  /** Turns the ledger on or off; the signal is handled before the next call comes. */
  const ledger = async (want) => {
    if (on === want) return;
    process.kill(pid, "SIGUSR2");
    on = want;
    await sleep(20);
  };
  const exec = () => callAction({ action: "exec", name: "w", cmd: "true" }, { env });
  for (let i = 0; i < 5; i++) await Promise.all([exec(), get(url)]);
  const warm = 5;

  /** `PAIRS` timings of `fn` with and without the ledger, each pair in the other order than the last. */
  async function pairs(fn, counted) {
    const withIt = [];
    const without = [];
    for (let i = 0; i < PAIRS; i++) {
      for (const side of i % 2 === 0 ? [true, false] : [false, true]) {
        await ledger(side);
        (side ? withIt : without).push(await timed(fn));
        if (side && counted) timedOn++;
      }
    }
    return { on: median(withIt), off: median(without), ratio: median(withIt.map((x, i) => x / without[i])) };
  }
  const note = (r) => `medians of ${PAIRS} pairs, one instance; median ratio of a pair ${r.ratio.toFixed(2)}`;
  const execs = await pairs(exec, true);
  row("exec true through the library: ledger on vs off", execs.on, execs.off, "ms", "<= 1.03", note(execs));
  const gets = await pairs(() => get(url), false);
  row("small preview GET: ledger on vs off", gets.on, gets.off, "ms", "<= 1.03", note(gets));

  await ledger(true);
  const { entries } = await callAction({ action: "audit", name: "w", kind: ["exec"], last: 100_000 }, { env });
  if (entries.length !== warm + timedOn) {
    throw new Error(`the ledger holds ${entries.length} execs; ${warm + timedOn} were made with it on`);
  }

  // One append on its own: an action entry's size, into a fresh ledger.
  const alone = Ledger.open(join(dir, "append-ledger"));
  const data = { action: "exec", caller: "library", args: { cmd: "true" }, outcome: "ok", ms: 31 };
  const n = 2000;
  const t = performance.now();
  for (let i = 0; i < n; i++) alone.append("action", data);
  row("one ledger append (hash, line, appendFileSync)", ((performance.now() - t) / n) * 1000, undefined, "us", "");
} finally {
  await callAction({ action: "destroy", name: "w" }, { env }).catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
}
printRows();
