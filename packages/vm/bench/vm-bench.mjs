#!/usr/bin/env node
// On-demand benchmark of @pi-sandbox/vm (npm run bench; needs a build). Prints ratios measured side
// by side in one run:
//   1. create-from-template: time and extra bytes, small vs ~10x larger template (no VM needed)
//   2. stop after writing 10 MiB: nearly empty disk vs ~1 GiB-filled disk (real VMs)
//   3. boot to first exec: startVm vs bare Gondolin VM.create + exec of the same image
//   4. warm start: first byte of a guest web server, start after suspend() vs after stop(), same
//      disk; suspend vs stop time; memory file vs guest memory
// Image: PI_SANDBOX_TEST_IMAGE, else `npm run -s test-image` at the workspace root.
// Skip parts with BENCH_SKIP=templates,stop,boot,suspend. Rounds: BENCH_ROUNDS (default 2).
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { median, summaryRow } from "./kit.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const workspace = path.resolve(here, "../../..");
const work = fs.mkdtempSync(path.join(os.tmpdir(), "pisb-bench-"));
// Isolate Gondolin (session registry, MITM CA) before anything imports it.
process.env.GONDOLIN_SESSIONS_DIR = path.join(work, "sessions");
process.env.XDG_CACHE_HOME = path.join(work, "cache");

const { DiskStore, startVm, runInGuest, directoryAllocatedBytes } = await import("../dist/index.js");

const MiB = 1024 ** 2;
const skip = new Set((process.env.BENCH_SKIP ?? "").split(",").filter(Boolean));
const rounds = Number(process.env.BENCH_ROUNDS ?? 2);
const stateRoot = path.join(work, "state");
const store = new DiskStore({ stateRoot });
const rows = [];

function testImage() {
  if (process.env.PI_SANDBOX_TEST_IMAGE) return process.env.PI_SANDBOX_TEST_IMAGE;
  const result = spawnSync("npm", ["run", "-s", "test-image"], {
    cwd: workspace,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (result.status !== 0) throw new Error("npm run -s test-image failed");
  return result.stdout.trim().split("\n").at(-1).trim();
}

const ms = (value) => `${value.toFixed(1)} ms`;
const mib = (value) => `${(value / MiB).toFixed(2)} MiB`;
function report(name, small, large, format, target) {
  const ratio = large / small;
  rows.push({ name, small: format(small), large: format(large), ratio: ratio.toFixed(2), target });
  // A row for `npm run bench`'s summary table: "ours" is the larger case.
  const unit = format === ms ? "ms" : "MiB";
  const scale = unit === "MiB" ? MiB : 1;
  summaryRow({ name, ours: large / scale, baseline: small / scale, ratio, unit, target });
}

async function timed(fn) {
  const started = performance.now();
  const value = await fn();
  return { ms: performance.now() - started, value };
}

const image = testImage();
console.error(`[bench] image ${image}; work dir ${work}`);

// 1. Templates: fill a source disk through qemu-io (the data's content does not matter here).
if (!skip.has("templates")) {
  const fakeImage = path.join(work, "fake-image");
  fs.mkdirSync(fakeImage);
  for (const f of ["vmlinuz-virt", "initramfs.cpio.lz4"]) fs.writeFileSync(path.join(fakeImage, f), f);
  fs.closeSync(fs.openSync(path.join(fakeImage, "rootfs.ext4"), "w"));
  fs.truncateSync(path.join(fakeImage, "rootfs.ext4"), 64 * MiB);
  const makeTemplate = async (name, dataMiB) => {
    const source = path.join(work, `tsrc-${name}`);
    await store.createDisk(source, { image: fakeImage, diskGiB: 4 });
    const run = await store.openRun(source);
    execFileSync("qemu-io", ["-f", "qcow2", "-c", `write -P 0x5a 0 ${dataMiB}M`, run.layerPath], { stdio: "ignore" });
    await run.checkpoint({ grown: true });
    const template = path.join(work, `tpl-${name}`);
    const info = await store.createTemplate(source, template);
    return { template, bytes: info.allocatedBytes };
  };
  const small = await makeTemplate("small", 50);
  const large = await makeTemplate("large", 500);
  const times = { small: [], large: [] };
  const extra = { small: [], large: [] };
  for (let i = 0; i < 15; i += 1) {
    for (const [key, tpl] of [
      ["small", small],
      ["large", large],
    ]) {
      const dir = path.join(work, `clone-${key}-${i}`);
      const { ms: took } = await timed(() => store.createFromTemplate(tpl.template, dir));
      times[key].push(took);
      extra[key].push(await directoryAllocatedBytes(dir, { exclusiveOnly: true }));
    }
  }
  console.error(`[bench] templates: small ${mib(small.bytes)}, large ${mib(large.bytes)}`);
  report("create from template: time (median of 15)", median(times.small), median(times.large), ms, "≤ 1.2");
  rows.push({
    name: "create from template: extra bytes (max)",
    small: `${(Math.max(...extra.small) / 1024).toFixed(0)} KiB`,
    large: `${(Math.max(...extra.large) / 1024).toFixed(0)} KiB`,
    ratio: "-",
    target: "≤ 2 MiB",
  });
}

const spec = { resources: { cpus: 1, memoryGiB: 1 }, network: { allowedHosts: [] } };
const boot = (name, diskDir) => startVm({ name, diskDir, stateRoot, spec, startTimeoutMs: 600_000 });
async function sh(vm, script) {
  const result = await runInGuest(vm, script);
  if (result.exitCode !== 0) throw new Error(`${script}: ${result.stderr}`);
  return result.stdout;
}

// 2. Stop time after 10 MiB of new data, empty vs ~1 GiB-filled disk.
if (!skip.has("stop")) {
  const empty = path.join(work, "stop-empty");
  const full = path.join(work, "stop-full");
  await store.createDisk(empty, { image, diskGiB: 4 });
  await store.createDisk(full, { image, diskGiB: 4 });
  for (const dir of [empty, full]) {
    // First boot grows the filesystem; keep it out of the measurement.
    const vm = await boot("prep", dir);
    if (dir === full) await sh(vm, "head -c 1073741824 /dev/urandom > /srv/fill");
    await vm.stop();
  }
  console.error(`[bench] filled disk holds ${mib((await store.inspect(full)).allocatedBytes)}`);
  const stops = { empty: [], full: [] };
  for (let i = 0; i < rounds; i += 1) {
    for (const [key, dir] of [
      ["empty", empty],
      ["full", full],
    ]) {
      const vm = await boot(key, dir);
      await sh(vm, `head -c 10485760 /dev/urandom > /srv/ten-${i}`);
      const result = await vm.stop();
      stops[key].push(result.totalMs);
    }
  }
  report(`stop after writing 10 MiB (median of ${rounds})`, median(stops.empty), median(stops.full), ms, "≤ 1.5");
}

// 3. Boot to first exec: ours vs bare Gondolin on the same image and accelerator.
if (!skip.has("boot")) {
  const gondolin = await import("@earendil-works/gondolin");
  const ours = path.join(work, "boot-ours");
  await store.createDisk(ours, { image, diskGiB: 2 });
  const warm = await boot("warm", ours);
  // Bare Gondolin gets the accelerator we chose (its own pick may be a /dev/kvm that cannot run).
  const accel = warm.accelerator;
  await warm.stop();
  const boots = { bare: [], ours: [] };
  for (let i = 0; i < rounds; i += 1) {
    const bare = await timed(async () => {
      const vm = await gondolin.VM.create({
        sandbox: { imagePath: image, accel: accel.accel, machineType: accel.machineType, cpu: accel.cpu },
        memory: "1024M",
        cpus: 1,
      });
      try {
        await vm.exec(["/bin/true"]);
      } finally {
        await vm.close();
      }
    });
    boots.bare.push(bare.ms);
    const mine = await timed(async () => {
      const vm = await boot("ours", ours);
      try {
        await runInGuest(vm, ["/bin/true"]);
      } finally {
        await vm.close();
      }
    });
    boots.ours.push(mine.ms);
  }
  report(
    `boot to first exec incl. close (median of ${rounds}; ${accel.accel})`,
    median(boots.bare),
    median(boots.ours),
    ms,
    "≤ 1.15",
  );
}

// 4. Warm start: the first byte of a guest web server after a suspend (it still runs) vs after a
// stop (the boot, then the server's own start, as services start after a cold boot).
if (!skip.has("suspend")) {
  const dir = path.join(work, "suspend");
  await store.createDisk(dir, { image, diskGiB: 2 });
  const serve =
    "mkdir -p /srv/www && echo hello > /srv/www/index.html && cd /srv/www && " +
    "setsid nohup python3 -m http.server 8080 --bind 127.0.0.1 >/dev/null 2>&1 &";
  const firstByte = async (vm) => {
    for (const deadline = Date.now() + 120_000; Date.now() < deadline;) {
      const body = await httpGet(vm, 8080).catch(() => "");
      if (body.includes("hello")) return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error("the guest web server never answered");
  };
  let vm = await boot("prep", dir);
  await sh(vm, serve);
  await firstByte(vm);
  const times = { cold: [], warm: [], suspend: [], stop: [], bytes: [] };
  for (let i = 0; i < rounds; i += 1) {
    const suspended = await vm.suspend();
    times.suspend.push(suspended.totalMs);
    times.bytes.push(suspended.memoryBytes);
    const warm = await timed(async () => {
      vm = await boot("warm", dir);
      await firstByte(vm);
    });
    if (!vm.restore?.warm) throw new Error(`the start after suspend was cold: ${vm.restore?.reason}`);
    times.warm.push(warm.ms);
    times.stop.push((await vm.stop()).totalMs);
    const cold = await timed(async () => {
      vm = await boot("cold", dir);
      await sh(vm, serve);
      await firstByte(vm);
    });
    times.cold.push(cold.ms);
  }
  await vm.close();
  const first = `start to first byte of a guest web server: after suspend vs after stop (median of ${rounds})`;
  report(first, median(times.cold), median(times.warm), ms, "≤ 0.25");
  report(`suspend vs stop time (median of ${rounds})`, median(times.stop), median(times.suspend), ms, "-");
  report("memory file vs guest memory (1 GiB)", 1024 * MiB, median(times.bytes), mib, "-");
}

async function httpGet(vm, port) {
  const stream = await vm.connectTcp(port, { timeoutMs: 10_000 });
  stream.end("GET / HTTP/1.0\r\nHost: localhost\r\n\r\n");
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}

console.log("| measurement | small / empty / bare | large / full / ours | ratio | target |");
console.log("|---|---|---|---|---|");
for (const row of rows) console.log(`| ${row.name} | ${row.small} | ${row.large} | ${row.ratio} | ${row.target} |`);
fs.rmSync(work, { recursive: true, force: true });
