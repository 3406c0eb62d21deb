#!/usr/bin/env node
// On-demand experiment (needs a build and PI_SANDBOX_TEST_IMAGE; not part of `npm run bench`):
// could forks of one saved guest share its memory through a RAM image file that each QEMU maps
// privately (copy-on-write), instead of each loading the saved stream into its own anonymous RAM?
// Plain QEMU on the test image (no Gondolin: its virtio ports get null backends, so the guest
// idles in its agent waiting for the host), 1 GiB guests, 1 vCPU, the accelerator of
// PI_SANDBOX_BENCH_ACCEL (default tcg):
//   1. a source boots with its RAM in a regular file (memory-backend-file share=on), is paused and
//      saved twice: with `x-ignore-shared` (device state only: the RAM is the file) and in full;
//   2. four "forks" load the full stream into anonymous RAM (what resuming a fork does today);
//   3. four forks map the file privately (share=off) and load the device-state stream with
//      `x-ignore-shared`; a fifth, paused, shows that its RAM equals the source's;
//   4. each fork's PSS after 30 s idle (smaps_rollup), all of them side by side;
//   5. a cold boot with its RAM mapped privately from a file filled with a pattern: how much of the
//      file it punched out (the free page reporting of our balloon device makes QEMU discard pages).
// `node packages/vm/bench/file-ram-bench.mjs`; about 4 minutes on 2 TCG cores.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { summaryRow } from "./kit.mjs";

const { QmpMonitor } = await import("../dist/host/qmp.js");

const MiB = 1024 ** 2;
const image = process.env.PI_SANDBOX_TEST_IMAGE;
if (!image) throw new Error("set PI_SANDBOX_TEST_IMAGE to the guest test image's directory");
const accel = process.env.PI_SANDBOX_BENCH_ACCEL ?? "tcg";
// The RAM file must be a regular file (page cache), not on a tmpfs, where it would be memory twice.
const dir = fs.mkdtempSync(path.join(process.env.PI_SANDBOX_BENCH_DIR ?? os.tmpdir(), "pisb-file-ram-"));
const file = (name) => path.join(dir, name);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const children = new Set();

/** The test image's guest with Gondolin's devices on null backends and our balloon. */
function guestArgs(name, memory) {
  return [
    "-nodefaults",
    "-no-reboot",
    "-smp",
    "1",
    "-accel",
    accel,
    "-cpu",
    accel === "kvm" ? "host" : "max",
    "-m",
    memory,
    "-kernel",
    path.join(image, "vmlinuz-virt"),
    "-initrd",
    path.join(image, "initramfs.cpio.lz4"),
    "-append",
    "console=ttyS0",
    "-display",
    "none",
    "-drive",
    `file=${path.join(image, "rootfs.ext4")},format=raw,if=none,id=drive0,snapshot=on`,
    "-device",
    "virtio-blk-pci,drive=drive0",
    "-device",
    "virtio-serial-pci,id=vs0",
    ...["virtio-port", "virtio-fs", "virtio-ssh", "virtio-ingress"].flatMap((port, i) => [
      "-chardev",
      `null,id=c${i}`,
      "-device",
      `virtserialport,chardev=c${i},name=${port},bus=vs0.0`,
    ]),
    "-device",
    "virtio-balloon-pci,free-page-reporting=on",
    "-serial",
    `file:${file(`${name}.log`)}`,
    "-qmp",
    `unix:${file(`${name}.qmp`)},server=on,wait=off`,
  ];
}

/** RAM as a file mapped shared (written back to it) or private (copy-on-write). */
const fileRam = (memory, ramFile, share) => [
  "-machine",
  "q35,memory-backend=pc.ram",
  "-object",
  `memory-backend-file,id=pc.ram,size=${memory},mem-path=${ramFile},share=${share ? "on" : "off"}`,
];

async function startQemu(name, args) {
  const child = spawn("qemu-system-x86_64", args, { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (chunk) => (stderr += chunk));
  children.add(child);
  child.on("exit", () => children.delete(child));
  const qmp = new QmpMonitor(file(`${name}.qmp`), { onIoErrorPause: () => undefined, connectTimeoutMs: 30_000 });
  if (!(await qmp.connected)) throw new Error(`${name}: no QMP (${stderr.trim()})`);
  return { name, child, qmp, stderr: () => stderr };
}

async function waitMigration(vm, timeoutMs = 180_000) {
  for (const deadline = Date.now() + timeoutMs; Date.now() < deadline; await sleep(200)) {
    const info = await vm.qmp.command("query-migrate");
    if (info.status === "completed") return info;
    if (info.status === "failed") throw new Error(`${vm.name}: migration failed: ${info["error-desc"] ?? vm.stderr()}`);
  }
  throw new Error(`${vm.name}: migration did not end`);
}

async function quit(vm) {
  await vm.qmp.command("quit").catch(() => undefined);
  vm.qmp.close();
  if (vm.child.exitCode === null) await new Promise((resolve) => vm.child.once("exit", resolve));
}

const pssOf = (pid) => {
  const rollup = fs.readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
  return Number(/^Pss:\s+(\d+) kB/m.exec(rollup)[1]) * 1024;
};
const allocated = (name) => fs.statSync(name).blocks * 512;
const mib = (bytes) => `${(bytes / MiB).toFixed(0)} MiB`;

async function waitForAgent(name, timeoutMs = 150_000) {
  for (const deadline = Date.now() + timeoutMs; Date.now() < deadline; await sleep(500)) {
    const log = fs.readFileSync(file(`${name}.log`), "utf8");
    if (log.includes("(sandboxd)")) return;
  }
  throw new Error(`${name}: the guest's agent did not start`);
}

async function idleForks(label, count, start) {
  const forks = [];
  for (let i = 1; i <= count; i++) forks.push(await start(`${label}${i}`));
  for (const fork of forks) await waitMigration(fork);
  for (const fork of forks) await fork.qmp.command("cont");
  await sleep(30_000);
  const pss = forks.map((fork) => pssOf(fork.child.pid));
  for (const fork of forks) await quit(fork);
  return pss;
}

try {
  const memory = "1G";
  const ram = file("ram.img");
  process.stderr.write("file-ram: booting the source…\n");
  const source = await startQemu("source", [...guestArgs("source", memory), ...fileRam(memory, ram, true)]);
  await waitForAgent("source");
  await sleep(15_000);
  await source.qmp.command("stop");
  await source.qmp.command(
    "pmemsave",
    { val: 0, size: 256 * MiB, filename: file("source.mem") },
    { timeoutMs: 120_000 },
  );
  const ignoreShared = (vm, state) =>
    vm.qmp.command("migrate-set-capabilities", { capabilities: [{ capability: "x-ignore-shared", state }] });
  await ignoreShared(source, true);
  await source.qmp.command("migrate", { uri: `exec:cat > ${file("devices.bin")}` });
  await waitMigration(source);
  await quit(source);

  const anonymous = (name) =>
    startQemu(name, [...guestArgs(name, memory), "-machine", "q35", "-incoming", `exec:cat ${file("full.bin")}`]);
  const mapped = async (name) => {
    const vm = await startQemu(name, [
      ...guestArgs(name, memory),
      ...fileRam(memory, ram, false),
      "-incoming",
      "defer",
    ]);
    await ignoreShared(vm, true);
    await vm.qmp.command("migrate-incoming", { uri: `exec:cat ${file("devices.bin")}` });
    return vm;
  };

  // A private mapping that got only the device state holds the source's RAM; saved from there in
  // full (QEMU saves a guest only once) it gives the stream a fork loads today.
  const check = await mapped("check");
  await waitMigration(check);
  await check.qmp.command("pmemsave", { val: 0, size: 256 * MiB, filename: file("check.mem") }, { timeoutMs: 120_000 });
  const same = fs.readFileSync(file("source.mem")).equals(fs.readFileSync(file("check.mem")));
  await ignoreShared(check, false);
  await check.qmp.command("migrate", { uri: `exec:cat > ${file("full.bin")}` });
  await waitMigration(check);
  await quit(check);
  const devicesBytes = fs.statSync(file("devices.bin")).size;
  const fullBytes = fs.statSync(file("full.bin")).size;
  console.log(
    `[file-ram] saved stream ${mib(fullBytes)}; with x-ignore-shared ${(devicesBytes / 1024).toFixed(0)} KiB`,
  );
  console.log(`[file-ram] RAM after loading only the device state equals the source's (first 256 MiB): ${same}`);

  process.stderr.write("file-ram: four forks each way…\n");
  const before = allocated(ram);
  const anonymousPss = await idleForks("anon", 4, anonymous);
  const mappedPss = await idleForks("mapped", 4, mapped);
  const sum = (values) => values.reduce((a, b) => a + b, 0);
  const one = [...anonymousPss].sort((a, b) => a - b)[2];
  console.log(`[file-ram] PSS after 30 s idle, anonymous RAM: ${anonymousPss.map(mib).join(", ")}`);
  console.log(`[file-ram] PSS after 30 s idle, RAM file mapped privately: ${mappedPss.map(mib).join(", ")}`);
  console.log(`[file-ram] RAM file allocated before the forks ${mib(before)}, after ${mib(allocated(ram))}`);

  process.stderr.write("file-ram: a cold boot on a private mapping of a filled file…\n");
  const filled = file("filled.img");
  const pattern = Buffer.alloc(MiB, 0xab);
  const handle = fs.openSync(filled, "w");
  for (let i = 0; i < 512; i++) fs.writeSync(handle, pattern);
  fs.fsyncSync(handle);
  fs.closeSync(handle);
  const filledBefore = allocated(filled);
  const cold = await startQemu("cold", [...guestArgs("cold", "512M"), ...fileRam("512M", filled, false)]);
  await waitForAgent("cold");
  await sleep(10_000);
  await quit(cold);
  const filledAfter = allocated(filled);
  console.log(
    `[file-ram] a cold boot mapping a 512 MiB file privately left ${mib(filledAfter)} of its ${mib(filledBefore)} allocated`,
  );

  const rows = [
    {
      name: "4 idle forks' QEMU PSS: RAM file mapped privately vs the stream loaded into anonymous RAM",
      ours: sum(mappedPss) / MiB,
      baseline: sum(anonymousPss) / MiB,
      unit: "MiB",
    },
    {
      name: "4 idle forks on a privately mapped RAM file vs one idle instance (anonymous RAM)",
      ours: sum(mappedPss) / MiB,
      baseline: one / MiB,
      unit: "MiB",
      target: "<= 2.0",
    },
    {
      name: "a file mapped privately as guest RAM: bytes still allocated after a cold boot (QEMU 7.2 punches holes)",
      ours: filledAfter / MiB,
      baseline: filledBefore / MiB,
      unit: "MiB",
      target: "1.0 (untouched)",
    },
  ];
  console.log("| measurement | ours | baseline | ratio | target |\n|---|---|---|---|---|");
  for (const row of rows) {
    const ratio = row.ours / row.baseline;
    console.log(
      `| ${row.name} | ${row.ours.toFixed(0)} MiB | ${row.baseline.toFixed(0)} MiB | ${ratio.toFixed(2)} | ${row.target ?? ""} |`,
    );
    summaryRow({ ...row, ratio: Number(ratio.toFixed(2)) });
  }
} finally {
  for (const child of children) child.kill("SIGKILL");
  fs.rmSync(dir, { recursive: true, force: true });
}
