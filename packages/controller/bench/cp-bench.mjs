// `pi-sandbox cp` of a large file into and out of a local instance, through the transfer disk and
// over the stream, side by side in one run: two tiny instances, one whose daemon was started with
// PI_SANDBOX_TRANSFER_DISK=off (the stream path), rounds alternating which goes first. Each copy is
// checked byte for byte, and the guest's transfer-disk counters (/sys/block/<dev>/stat) say which
// way the bytes went. Needs a build; PI_SANDBOX_TEST_IMAGE or the default bench image.
// PI_SANDBOX_BENCH_ROUNDS (default 2), PI_SANDBOX_BENCH_MIB (default 100).
import { spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir, loadavg } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { benchImage, median, printRows, row, webYaml } from "./kit.mjs";

const CLI = fileURLToPath(new URL("../bin/pi-sandbox.js", import.meta.url));
const ROUNDS = Number(process.env.PI_SANDBOX_BENCH_ROUNDS ?? 2);
const MIB = Number(process.env.PI_SANDBOX_BENCH_MIB ?? 100);
const dir = mkdtempSync(join(tmpdir(), "cpb-"));
const env = { ...process.env, PI_SANDBOX_HOME: join(dir, "state") };
const WAYS = { disk: {}, stream: { PI_SANDBOX_TRANSFER_DISK: "off" } };

function cli(args, extra = {}) {
  const r = spawnSync(process.execPath, [CLI, ...args], { env: { ...env, ...extra }, cwd: dir, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`pi-sandbox ${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

/** MiB the guest of `name` read from and wrote to its transfer disk so far. */
function driveMiB(name) {
  const script =
    'for d in /sys/block/*; do [ "$(cat $d/serial 2>/dev/null)" = pisb-transfer ] && cat $d/stat; done; true';
  const fields = cli(["exec", name, "--", script], WAYS[name]).trim().split(/\s+/).map(Number);
  return { read: ((fields[2] ?? 0) * 512) / 2 ** 20, written: ((fields[6] ?? 0) * 512) / 2 ** 20 };
}

const sha = (buffer) => createHash("sha256").update(buffer).digest("hex");

try {
  writeFileSync(join(dir, "sandbox.yaml"), webYaml(benchImage(), "cp"));
  // Each instance's daemon starts with its create and keeps that environment.
  for (const [name, extra] of Object.entries(WAYS)) cli(["create", name, "-c", "sandbox.yaml"], extra);
  const data = randomBytes(MIB * 2 ** 20);
  const big = join(dir, "big.bin");
  writeFileSync(big, data);
  const times = { disk: { in: [], out: [] }, stream: { in: [], out: [] } };
  const drive = { disk: driveMiB("disk"), stream: driveMiB("stream") };
  const loads = [];
  for (let i = 0; i < ROUNDS; i++) {
    const order = i % 2 ? ["stream", "disk"] : ["disk", "stream"];
    for (const [way, name] of order.map((n) => [n, n])) {
      loads.push(loadavg()[0]);
      let t = performance.now();
      cli(["cp", big, `${name}:/workspace/big-${i}.bin`], WAYS[way]);
      times[way].in.push(performance.now() - t);
      const back = join(dir, `back-${name}-${i}.bin`);
      t = performance.now();
      cli(["cp", `${name}:/workspace/big-${i}.bin`, back], WAYS[way]);
      times[way].out.push(performance.now() - t);
      if (sha(readFileSync(back)) !== sha(data)) throw new Error(`${name}: the copy that came back differs`);
      rmSync(back);
      cli(["exec", name, "--", `rm -f /workspace/big-${i}.bin`], WAYS[way]);
    }
  }
  const moved = Object.fromEntries(
    Object.keys(WAYS).map((name) => {
      const now = driveMiB(name);
      return [
        name,
        `${Math.round(now.read - drive[name].read)} MiB read, ${Math.round(now.written - drive[name].written)} written`,
      ];
    }),
  );
  const rate = (ms) => MIB / (median(ms) / 1000);
  const each = (ms) => ms.map((x) => (MIB / (x / 1000)).toFixed(1)).join(", ");
  for (const [way, key] of [
    ["into", "in"],
    ["out of", "out"],
  ]) {
    row(
      `cp ${MIB} MiB ${way} a local guest: transfer disk vs stream`,
      rate(times.disk[key]),
      rate(times.stream[key]),
      "MiB/s",
      ">= 40 MiB/s",
      `rounds: disk ${each(times.disk[key])}; stream ${each(times.stream[key])}`,
    );
  }
  console.log(
    `guest transfer-disk I/O during the copies: disk instance ${moved.disk}; stream instance ${moved.stream}`,
  );
  console.log(`load average at each copy: ${loads.map((l) => l.toFixed(1)).join(" ")}`);
  printRows();
} finally {
  for (const name of Object.keys(WAYS)) spawnSync(process.execPath, [CLI, "destroy", "-f", name], { env, cwd: dir });
  rmSync(dir, { recursive: true, force: true });
}
