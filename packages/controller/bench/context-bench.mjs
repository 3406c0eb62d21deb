// Contexts against #48's targets, side by side in one run, through the pi-sandbox CLI: a small
// preview GET through the context's forward against the same GET on the other machine itself
// (inside its network namespace, where the preview listens: the forward is all that differs),
// `create` to the first preview byte through the context against a local create, and `cp` of
// 100 MiB into and out of the guest, through the context and with a local instance, against scp
// of the same file between the same accounts. The other machine is the e2e suite's (a second
// account over a real sshd in a network namespace: the controller testing entry's sshRemote), so
// this needs root. Prints a table and, when PI_SANDBOX_BENCH_OUT is set, appends JSON rows.
// PI_SANDBOX_BENCH_ONLY=create runs only the create row, PI_SANDBOX_BENCH_ROUNDS times (default 1),
// local and through the context alternately; with PI_SANDBOX_TRACE=<file> the far side's marks go
// to <file>.far (its pi-sandbox runs as the other account, so it writes a file of its own there).
import { execFileSync, spawnSync } from "node:child_process";
import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { sshRemote } from "../dist/testing.js";
import { benchImage, median, printRows, row, sleep } from "./kit.mjs";

if (process.getuid?.() !== 0) {
  console.log("context bench skipped: it adds a Unix account and a network namespace, which needs root");
  process.exit(0);
}

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
const GETS = Number(process.env.PI_SANDBOX_BENCH_GETS ?? 200);
const ONLY = process.env.PI_SANDBOX_BENCH_ONLY;
const ROUNDS = Number(process.env.PI_SANDBOX_BENCH_ROUNDS ?? 1);
const image = benchImage();
const dir = mkdtempSync("/tmp/ctxb-");
const remote = await sshRemote(dir, image);
const env = remote.env;
const TRACE = process.env.PI_SANDBOX_TRACE;
const farTrace = join(remote.remoteDir, "tmp", "trace");
if (TRACE) env.PI_SANDBOX_REMOTE_COMMAND = `env PI_SANDBOX_TRACE=${farTrace} pi-sandbox`;

function cli(args, extra = {}, program = CLI) {
  const r = spawnSync(process.execPath, [program, ...args], { env: { ...env, ...extra }, cwd: dir, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`pi-sandbox ${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

const yaml = (imagePath) =>
  [
    "version: 1",
    `image: ${imagePath}`,
    "profile: tiny",
    "diskGiB: 4",
    "setup:",
    "  - printf 'warm\\n' > /workspace/index.html",
    "services:",
    "  web:",
    "    command: python3 -m http.server $PORT --bind 127.0.0.1",
    "    preview: true",
    "",
  ].join("\n");
writeFileSync(join(dir, "local.yaml"), yaml(image));
writeFileSync(join(dir, "far.yaml"), yaml(remote.remoteImage));

/** Ms from the create's start to the first 200 of its preview (create returns once it serves). */
function createToFirstByte(args, extra = {}, program = CLI) {
  const t = performance.now();
  const out = cli(args, extra, program);
  const url = /^preview:\s+(\S+)/m.exec(out)?.[1];
  if (!url) throw new Error(`no preview in:\n${out}`);
  const got = execFileSync("curl", ["-sf", "--max-time", "60", url], { encoding: "utf8" });
  if (got !== "warm\n") throw new Error(`preview answered ${JSON.stringify(got)}`);
  return { ms: performance.now() - t, url };
}

/** The p50 of GETS sequential GETs of `url` by a small Node client, run with `prefix` (a namespace). */
function getP50(url, prefix = []) {
  const script = `
    const http = require("node:http");
    const agent = new http.Agent({ keepAlive: false });
    const one = () => new Promise((ok, no) => http.get(${JSON.stringify(url)}, { agent }, (res) => { res.resume(); res.on("end", ok); }).on("error", no));
    (async () => { const xs = []; for (let i = 0; i < ${GETS}; i++) { const t = performance.now(); await one(); xs.push(performance.now() - t); }
      xs.sort((a, b) => a - b); console.log(xs[Math.floor(xs.length / 2)]); })();`;
  const argv = [...prefix, process.execPath, "-e", script];
  return Number(execFileSync(argv[0], argv.slice(1), { encoding: "utf8" }));
}

try {
  cli(["context", "add", "far", `ssh://${remote.host}`]);
  // Warm the ssh master first: the first login is not what a command through a context costs.
  cli(["ls", "--context", "far"]);

  // PI_SANDBOX_BENCH_BEFORE_CLI=<another build's dist/cli/main.js>: its create through the context
  // runs in each round too (an earlier commit's laptop side against the same far side).
  const before = process.env.PI_SANDBOX_BENCH_BEFORE_CLI;
  const sides = before ? ["local", "far", "before"] : ["local", "far"];
  const creates = Object.fromEntries(sides.map((side) => [side, []]));
  let local, far;
  for (let i = 0; i < ROUNDS; i++) {
    if (i > 0) {
      cli(["destroy", "-f", "loc", "--context", "local"]);
      cli(["destroy", "-f", "far", "--context", "far"]);
    }
    // Each side first in turn, so none always runs on the host another just warmed.
    const order = sides.map((_, k) => sides[(i + k) % sides.length]);
    for (const side of order) {
      if (TRACE)
        appendFileSync(TRACE, `${(performance.timeOrigin + performance.now()).toFixed(1)} bench ${side} ${i}\n`);
      if (side === "local") local = createToFirstByte(["create", "loc", "-c", "local.yaml", "--context", "local"]);
      else if (side === "far") far = createToFirstByte(["create", "far", "-c", "far.yaml", "--context", "far"]);
      else {
        const t = createToFirstByte(["create", "farb", "-c", "far.yaml", "--context", "far"], {}, before);
        cli(["destroy", "-f", "farb", "--context", "far"]);
        creates[side].push(t.ms);
        continue;
      }
      creates[side].push((side === "local" ? local : far).ms);
    }
  }
  const secs = (side) => creates[side].map((ms) => (ms / 1000).toFixed(1)).join(" ");
  const note = (side) => (ROUNDS > 1 ? `medians of ${ROUNDS}; ${side} ${secs(side)}, local ${secs("local")}` : "");
  for (const side of before ? ["far", "before"] : ["far"])
    row(
      `create to first preview byte, through a context${side === "before" ? " (before)" : ""} vs local`,
      median(creates[side]) / 1000,
      median(creates.local) / 1000,
      "s",
      "<= 1.1x",
      note(side),
    );
  if (ONLY === "create") throw Object.assign(new Error("only create"), { only: true });

  // The same instance's preview: through the forward here, and on the other machine itself.
  const netns = `pisb-ctx-${process.pid}`;
  await sleep(500);
  const there = getP50(far.url, ["ip", "netns", "exec", netns]);
  const here = getP50(far.url);
  row(
    "small preview GET p50, through a context vs on that machine",
    here,
    there,
    "ms",
    "<= +5 ms",
    `${GETS} GETs each, no keep-alive`,
  );
  const localGet = getP50(local.url);
  row("small preview GET p50, through a context vs a local instance", here, localGet, "ms", "<= +5 ms");

  const big = join(dir, "big.bin");
  writeFileSync(
    big,
    execFileSync("head", ["-c", String(100 * 1024 * 1024), "/dev/urandom"], { maxBuffer: 200 * 1024 * 1024 }),
  );
  const ups = { far: [], scp: [], local: [] };
  const downs = { far: [], scp: [], local: [] };
  const timed = (list, fn) => {
    const t = performance.now();
    fn();
    list.push(performance.now() - t);
  };
  const scp = (...args) => execFileSync(join(dir, "scp"), ["-q", ...args]);
  const farPath = (path) => `${remote.host}:${remote.remoteDir}${path}`;
  for (let i = 0; i < 2; i++) {
    timed(ups.local, () => cli(["cp", big, `loc:/tmp/big-${i}.bin`, "--context", "local"]));
    timed(ups.far, () => cli(["cp", big, `far:/tmp/big-${i}.bin`, "--context", "far"]));
    timed(ups.scp, () => scp(big, farPath(`/tmp/big-${i}.bin`)));
    timed(downs.local, () =>
      cli(["cp", `loc:/tmp/big-${i}.bin`, join(dir, `back-loc-${i}.bin`), "--context", "local"]),
    );
    timed(downs.far, () => cli(["cp", `far:/tmp/big-${i}.bin`, join(dir, `back-far-${i}.bin`), "--context", "far"]));
    timed(downs.scp, () => scp(farPath(`/tmp/big-${i}.bin`), join(dir, `back-scp-${i}.bin`)));
  }
  const mib = 100;
  const rate = (ms) => mib / (median(ms) / 1000);
  for (const [way, times] of [
    ["into", ups],
    ["out of", downs],
  ]) {
    row(
      `cp 100 MiB ${way} the guest through a context vs scp between the accounts`,
      rate(times.far),
      rate(times.scp),
      "MiB/s",
      ">= 0.5x",
    );
    row(
      `cp 100 MiB ${way} a local guest vs scp between the accounts`,
      rate(times.local),
      rate(times.scp),
      "MiB/s",
      ">= 40 MiB/s",
      "the guest's side of a copy, without ssh",
    );
  }
  // Before the cleanup, whose failure would lose them.
  printRows();
} catch (error) {
  if (!error.only) throw error;
  printRows();
} finally {
  for (const [name, context] of [
    ["loc", "local"],
    ["far", "far"],
  ]) {
    spawnSync(process.execPath, [CLI, "destroy", "-f", name, "--context", context], { env, cwd: dir });
  }
  if (TRACE) spawnSync("sh", ["-c", `cat ${farTrace} >> ${TRACE}.far`]);
  await remote.close();
  rmSync(dir, { recursive: true, force: true });
}
