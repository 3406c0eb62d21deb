// What the ledger costs (#47's target: within 3 %), side by side in one run: two instances of the
// same config, one whose daemon writes its ledger and one started with PI_SANDBOX_BENCH_NO_LEDGER=1
// (a bench-only switch: it writes none). `exec true` through the library (an action entry and an
// exec entry each) and a small preview GET (preview traffic is summed per minute, so nothing per
// request) are timed in pairs, the order alternating, so a drift of the host's speed reaches both
// sides alike; and what one append costs on its own (hash, JSON line, appendFileSync: no fsync).
// Prints a table and, when PI_SANDBOX_BENCH_OUT is set, appends JSON rows.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction } from "../dist/client/index.js";
import { Ledger } from "../dist/state/ledger.js";
import { benchImage, median, printRows, row } from "./kit.mjs";

const PAIRS = Number(process.env.PI_SANDBOX_BENCH_PAIRS ?? 60);
const image = benchImage();
const dir = mkdtempSync(join(tmpdir(), "ledb-"));
const env = { ...process.env, PI_SANDBOX_HOME: join(dir, "state") };
const envOff = { ...env, PI_SANDBOX_BENCH_NO_LEDGER: "1" };

/** Ms of `fn`. */
async function timed(fn) {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

/** `PAIRS` timings of `on` and `off`, each pair in the other order than the last. */
async function pairs(on, off) {
  const a = [];
  const b = [];
  for (let i = 0; i < PAIRS; i++) {
    if (i % 2 === 0) {
      a.push(await timed(on));
      b.push(await timed(off));
    } else {
      b.push(await timed(off));
      a.push(await timed(on));
    }
  }
  return { on: median(a), off: median(b) };
}

/** A GET of `url` to the last byte; throws unless it is the page. */
async function get(url) {
  const res = await fetch(url);
  if ((await res.text()) !== "small\n") throw new Error(`${url} answered ${res.status}`);
}

try {
  writeFileSync(
    join(dir, "web.yaml"),
    `version: 1\nprofile: tiny\ndiskGiB: 4\nimage: ${image}\nsetup:\n  - printf 'small\\n' > /workspace/index.html\n` +
      "services:\n  web:\n    command: python3 -m http.server $PORT --bind 127.0.0.1\n    health: /\n    preview: true\n",
  );
  const on = await callAction({ action: "create", name: "on", config: "web.yaml" }, { env, cwd: dir });
  const off = await callAction({ action: "create", name: "off", config: "web.yaml" }, { env: envOff, cwd: dir });
  const exec = (name, e) => () => callAction({ action: "exec", name, cmd: "true" }, { env: e });
  // Warm both (the first calls load code paths) before anything is timed.
  for (let i = 0; i < 5; i++) await Promise.all([exec("on", env)(), exec("off", envOff)(), get(on.previews[0].url)]);
  await get(off.previews[0].url);

  const execs = await pairs(exec("on", env), exec("off", envOff));
  row("exec true through the library: ledger on vs off", execs.on, execs.off, "ms", "<= 1.03", `median of ${PAIRS}`);
  const gets = await pairs(
    () => get(on.previews[0].url),
    () => get(off.previews[0].url),
  );
  row("small preview GET: ledger on vs off", gets.on, gets.off, "ms", "<= 1.03", `median of ${PAIRS}`);

  const { entries } = await callAction({ action: "audit", name: "on", kind: ["exec"], last: 100_000 }, { env });
  if (entries.length < PAIRS) throw new Error(`the ledger holds ${entries.length} execs of the ${PAIRS} timed`);
  const offLedger = await callAction({ action: "audit", name: "off", last: 10 }, { env }).catch((e) => e);
  if (offLedger.entries?.length) throw new Error("the instance without a ledger has one");

  // One append on its own: an action entry's size, into a fresh ledger.
  const ledger = Ledger.open(join(dir, "append-ledger"));
  const data = { action: "exec", caller: "library", args: { cmd: "true" }, outcome: "ok", ms: 31 };
  const n = 2000;
  const t = performance.now();
  for (let i = 0; i < n; i++) ledger.append("action", data);
  row("one ledger append (hash, line, appendFileSync)", ((performance.now() - t) / n) * 1000, undefined, "us", "");
} finally {
  for (const [name, e] of [
    ["on", env],
    ["off", envOff],
  ])
    await callAction({ action: "destroy", name }, { env: e }).catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
}
printRows();
