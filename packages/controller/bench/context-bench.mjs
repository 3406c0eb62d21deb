// Contexts against #48's targets, side by side in one run, through the pi-sandbox CLI: a small
// preview GET through the context's forward against the same GET on the other machine itself
// (inside its network namespace, where the preview listens: the forward is all that differs),
// `create` to the first preview byte through the context against a local create, and `cp` of
// 100 MiB into and out of the guest, through the context and with a local instance, against scp
// of the same file between the same accounts. The other machine is the e2e suite's (a second
// account over a real sshd in a network namespace: the controller testing entry's sshRemote), so
// this needs root. Prints a table and, when PI_SANDBOX_BENCH_OUT is set, appends JSON rows.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
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
const image = benchImage();
const dir = mkdtempSync("/tmp/ctxb-");
const remote = await sshRemote(dir, image);
const env = remote.env;

function cli(args, extra = {}) {
  const r = spawnSync(process.execPath, [CLI, ...args], { env: { ...env, ...extra }, cwd: dir, encoding: "utf8" });
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
function createToFirstByte(args, extra = {}) {
  const t = performance.now();
  const out = cli(args, extra);
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

  const local = createToFirstByte(["create", "loc", "-c", "local.yaml", "--context", "local"]);
  const far = createToFirstByte(["create", "far", "-c", "far.yaml", "--context", "far"]);
  row("create to first preview byte, through a context vs local", far.ms / 1000, local.ms / 1000, "s", "<= 1.1x");

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
} finally {
  for (const [name, context] of [
    ["loc", "local"],
    ["far", "far"],
  ]) {
    spawnSync(process.execPath, [CLI, "destroy", "-f", name, "--context", context], { env, cwd: dir });
  }
  await remote.close();
  rmSync(dir, { recursive: true, force: true });
}
