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
//   3. four forks map the file privately (share=off; on QEMU 8.2+ also `readonly=on,rom=off`: the
//      file opened read-only, the mapping writable) and load the device-state stream with
//      `x-ignore-shared`; a fifth, paused, shows that its RAM equals the source's;
//   4. each fork's PSS after 30 s idle (smaps_rollup), all of them side by side;
//   5. a cold boot with its RAM mapped privately (as the forks map it) from a file filled with a
//      pattern: how much of the file is left (allocated blocks, and bytes that still hold the
//      pattern), and how many discards QEMU made or refused (the free page reporting of our
//      balloon device makes it discard what the guest frees), against a cold boot on anonymous RAM;
//   6. with PI_SANDBOX_BENCH_QEMU_OLD (a second QEMU, e.g. the system's 7.2): a guest saved by that
//      QEMU on `pc-q35-7.2` loaded into this one, on `pc-q35-7.2` and on the bare `q35` alias.
// PI_SANDBOX_BENCH_QEMU picks the QEMU binary (default qemu-system-x86_64 on PATH) and
// PI_SANDBOX_BENCH_QEMU_DATA its firmware directories (`-L`, separated by colons), so a QEMU
// unpacked under /tmp can be measured without replacing the system's (packages/vm/README.md,
// "Why forks do not share their memory"). Discards are counted with QEMU's trace event
// `ram_block_discard_range` (Debian's QEMU logs trace events to stderr).
// `node packages/vm/bench/file-ram-bench.mjs`; about 6 minutes on 2 TCG cores.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { summaryRow } from "./kit.mjs";

const { QmpMonitor } = await import("../dist/host/qmp.js");

const MiB = 1024 ** 2;
const image = process.env.PI_SANDBOX_TEST_IMAGE;
if (!image) throw new Error("set PI_SANDBOX_TEST_IMAGE to the guest test image's directory");
const accel = process.env.PI_SANDBOX_BENCH_ACCEL ?? "tcg";
const qemu = process.env.PI_SANDBOX_BENCH_QEMU || "qemu-system-x86_64";
const qemuData = (process.env.PI_SANDBOX_BENCH_QEMU_DATA ?? "").split(":").filter(Boolean);
const oldQemu = process.env.PI_SANDBOX_BENCH_QEMU_OLD;
const versionLine = (binary) => spawnSync(binary, ["--version"], { encoding: "utf8" }).stdout.split("\n")[0];
const qemuVersion = versionLine(qemu);
const [major, minor] = /version (\d+)\.(\d+)/.exec(qemuVersion).slice(1).map(Number);
// QEMU 8.2+: `readonly=on,rom=off` opens the file read-only and maps it private and writable.
const readonlyPrivate = major > 8 || (major === 8 && minor >= 2);
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
  `memory-backend-file,id=pc.ram,size=${memory},mem-path=${ramFile},share=${share ? "on" : "off"}` +
    (!share && readonlyPrivate ? ",readonly=on,rom=off" : ""),
];

async function startQemu(name, args, binary = qemu) {
  const data = binary === qemu ? qemuData.flatMap((dir) => ["-L", dir]) : [];
  const trace = ["-trace", "ram_block_discard_range"];
  const child = spawn(binary, [...data, ...trace, ...args], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (chunk) => (stderr += chunk));
  children.add(child);
  const exited = new Promise((resolve) => child.once("exit", resolve));
  void exited.then(() => children.delete(child));
  const qmp = new QmpMonitor(file(`${name}.qmp`), { onIoErrorPause: () => undefined, connectTimeoutMs: 30_000 });
  if (!(await qmp.connected)) throw new Error(`${name}: no QMP (${stderr.trim()})`);
  return { name, child, qmp, exited, stderr: () => stderr };
}

async function waitMigration(vm, timeoutMs = 180_000) {
  for (const deadline = Date.now() + timeoutMs; Date.now() < deadline; await sleep(200)) {
    // A QEMU that refuses the stream exits, and QMP does not answer a QEMU that is gone.
    const info = await Promise.race([
      vm.qmp.command("query-migrate"),
      vm.exited.then(() => ({ status: "failed", "error-desc": `QEMU exited: ${vm.stderr().trim()}` })),
    ]);
    if (info.status === "completed") return info;
    if (info.status === "failed") throw new Error(`${vm.name}: migration failed: ${info["error-desc"] ?? vm.stderr()}`);
  }
  throw new Error(`${vm.name}: migration did not end`);
}

async function quit(vm) {
  await Promise.race([vm.qmp.command("quit").catch(() => undefined), vm.exited]);
  vm.qmp.close();
  await vm.exited;
}

const rollupOf = (pid, field) => {
  const rollup = fs.readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
  return Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(rollup)[1]) * 1024;
};
const pssOf = (pid) => rollupOf(pid, "Pss");
/** Discards QEMU traced (the madvise/fallocate done or refused) and discards it refused outright. */
const discardsOf = (vm) => {
  const text = vm.stderr();
  const traced = text.match(/ram_block_discard_range .*ret: (-?\d+)/g) ?? [];
  return {
    traced: traced.length,
    failed: traced.filter((line) => !line.endsWith("ret: 0")).length,
    refusedReadonly: (text.match(/Discarding RAM with readonly files is not supported/g) ?? []).length,
    privateWarning: text.includes("Discarding RAM in private file mappings is possibly dangerous"),
  };
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
  const discards = forks.map(discardsOf);
  for (const fork of forks) await quit(fork);
  return { pss, discards };
}

/** Bytes of a file that no longer hold the byte it was filled with. */
function bytesNotMatching(name, byte) {
  const handle = fs.openSync(name, "r");
  const chunk = Buffer.alloc(MiB);
  let wrong = 0;
  for (let read; (read = fs.readSync(handle, chunk, 0, MiB, null)) > 0;) {
    for (let i = 0; i < read; i++) if (chunk[i] !== byte) wrong++;
  }
  fs.closeSync(handle);
  return wrong;
}

/** A cold boot, left 20 s idle after its agent started: its RSS split and the discards it made. */
async function coldBoot(name, ramArgs) {
  const vm = await startQemu(name, [...guestArgs(name, "512M"), ...ramArgs]);
  await waitForAgent(name);
  const atAgent = { rss: rollupOf(vm.child.pid, "Rss"), anon: rollupOf(vm.child.pid, "Anonymous") };
  await sleep(20_000);
  const after = { rss: rollupOf(vm.child.pid, "Rss"), anon: rollupOf(vm.child.pid, "Anonymous") };
  const discards = discardsOf(vm);
  await quit(vm);
  return { atAgent, after, discards };
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

  console.log(
    `[file-ram] ${qemuVersion}; private mappings ${readonlyPrivate ? "with readonly=on,rom=off" : "read-write"}`,
  );
  const capabilities = await (async () => {
    const probe = await startQemu("probe", [
      ...["-nodefaults", "-display", "none", "-machine", "none", "-S"],
      ...["-qmp", `unix:${file("probe.qmp")},server=on,wait=off`],
    ]);
    const list = await probe.qmp.command("query-migrate-capabilities");
    await quit(probe);
    return list.map((entry) => entry.capability);
  })();
  console.log(`[file-ram] migration capability mapped-ram: ${capabilities.includes("mapped-ram")}`);
  process.stderr.write("file-ram: four forks each way…\n");
  const before = allocated(ram);
  const { pss: anonymousPss } = await idleForks("anon", 4, anonymous);
  const { pss: mappedPss, discards: mappedDiscards } = await idleForks("mapped", 4, mapped);
  const sum = (values) => values.reduce((a, b) => a + b, 0);
  const one = [...anonymousPss].sort((a, b) => a - b)[2];
  console.log(`[file-ram] PSS after 30 s idle, anonymous RAM: ${anonymousPss.map(mib).join(", ")}`);
  console.log(`[file-ram] PSS after 30 s idle, RAM file mapped privately: ${mappedPss.map(mib).join(", ")}`);
  console.log(`[file-ram] RAM file allocated before the forks ${mib(before)}, after ${mib(allocated(ram))}`);
  console.log(`[file-ram] the mapped forks' discards while idle: ${JSON.stringify(mappedDiscards)}`);

  // (c) Does free page reporting still give a fork's memory back? Its guest takes 256 MiB (the
  // balloon inflated: the guest allocates and, its kernel zeroing allocations, writes those pages)
  // and gives them back (deflated: freed, then reported), in a mapped and an anonymous fork.
  process.stderr.write("file-ram: a mapped and an anonymous fork whose guests take and free 256 MiB…\n");
  const pair = [await mapped("bmapped"), await anonymous("banon")];
  for (const fork of pair) await waitMigration(fork);
  for (const fork of pair) await fork.qmp.command("cont");
  await sleep(15_000);
  const anonOf = () => pair.map((fork) => rollupOf(fork.child.pid, "Anonymous"));
  const balloonIdle = anonOf();
  for (const fork of pair) await fork.qmp.command("balloon", { value: 768 * MiB });
  await sleep(40_000);
  const inflated = await Promise.all(pair.map(async (fork) => (await fork.qmp.command("query-balloon")).actual));
  const balloonTaken = anonOf();
  for (const fork of pair) await fork.qmp.command("balloon", { value: 1024 * MiB });
  await sleep(40_000);
  const balloonFreed = anonOf();
  const balloonDiscards = pair.map(discardsOf);
  for (const fork of pair) await quit(fork);
  for (const [i, name] of ["mapped fork", "anonymous fork"].entries()) {
    console.log(
      `[file-ram] ${name}: anonymous memory idle ${mib(balloonIdle[i])}, guest at ${mib(inflated[i])} ${mib(balloonTaken[i])}, ` +
        `given back ${mib(balloonFreed[i])}; discards ${JSON.stringify(balloonDiscards[i])}`,
    );
  }

  process.stderr.write("file-ram: a cold boot on a private mapping of a filled file, one on anonymous RAM…\n");
  const filled = file("filled.img");
  const pattern = Buffer.alloc(MiB, 0xab);
  const handle = fs.openSync(filled, "w");
  for (let i = 0; i < 512; i++) fs.writeSync(handle, pattern);
  fs.fsyncSync(handle);
  fs.closeSync(handle);
  const filledBefore = allocated(filled);
  const filledMtime = fs.statSync(filled).mtimeMs;
  const cold = await coldBoot("cold", fileRam("512M", filled, false));
  const filledAfter = allocated(filled);
  const wrongBytes = bytesNotMatching(filled, 0xab);
  const touched = fs.statSync(filled).mtimeMs !== filledMtime;
  console.log(
    `[file-ram] a cold boot mapping a 512 MiB file privately left ${mib(filledAfter)} of its ${mib(filledBefore)} allocated; ` +
      `bytes no longer 0xab: ${wrongBytes}; mtime changed: ${touched}`,
  );
  const coldAnon = await coldBoot("coldanon", ["-machine", "q35"]);
  const show = (run) =>
    `RSS ${mib(run.atAgent.rss)} -> ${mib(run.after.rss)}, anonymous ${mib(run.atAgent.anon)} -> ${mib(run.after.anon)}, discards ${JSON.stringify(run.discards)}`;
  console.log(`[file-ram] cold boot on the private file mapping: ${show(cold)}`);
  console.log(`[file-ram] cold boot on anonymous RAM: ${show(coldAnon)}`);

  let compat;
  if (oldQemu) {
    process.stderr.write(`file-ram: a guest saved by ${oldQemu} loaded into ${qemu}…\n`);
    const machine = "pc-q35-7.2";
    const old = await startQemu("old", [...guestArgs("old", "512M"), "-machine", machine], oldQemu);
    await waitForAgent("old");
    await sleep(10_000);
    await old.qmp.command("stop");
    await old.qmp.command("pmemsave", { val: 0, size: 256 * MiB, filename: file("old.mem") }, { timeoutMs: 120_000 });
    await old.qmp.command("migrate", { uri: `exec:cat > ${file("old.bin")}` });
    await waitMigration(old);
    await quit(old);
    const load = async (name, machineType) => {
      const refused = (error, vm) => ({
        loaded: false,
        reason: `${error.message} ${vm?.stderr() ?? ""}`.replace(/\s+/g, " ").slice(0, 400),
      });
      // A QEMU that refuses the stream's machine type exits before its QMP socket is up.
      let vm;
      try {
        vm = await startQemu(name, [
          ...guestArgs(name, "512M"),
          "-machine",
          machineType,
          "-incoming",
          `exec:cat ${file("old.bin")}`,
        ]);
      } catch (error) {
        return refused(error);
      }
      try {
        await waitMigration(vm, 120_000);
      } catch (error) {
        await quit(vm);
        return refused(error, vm);
      }
      await vm.qmp.command(
        "pmemsave",
        { val: 0, size: 256 * MiB, filename: file(`${name}.mem`) },
        { timeoutMs: 120_000 },
      );
      const sameRam = fs.readFileSync(file("old.mem")).equals(fs.readFileSync(file(`${name}.mem`)));
      await vm.qmp.command("cont");
      await sleep(15_000);
      const status = (await vm.qmp.command("query-status")).status;
      const log = fs.readFileSync(file(`${name}.log`), "utf8");
      await quit(vm);
      return { loaded: true, sameRam, status, panic: /Kernel panic|Oops|BUG:/.test(log) };
    };
    compat = { pinned: await load("new72", machine), alias: await load("newq35", "q35") };
    console.log(`[file-ram] ${versionLine(oldQemu)} stream (${machine}) into ${qemuVersion}:`);
    console.log(`[file-ram]   on ${machine}: ${JSON.stringify(compat.pinned)}`);
    console.log(`[file-ram]   on q35: ${JSON.stringify(compat.alias)}`);
  }

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
    {
      name: "a fork's anonymous memory after its guest took 256 MiB and gave it back: RAM file mapped privately vs anonymous RAM",
      ours: balloonFreed[0] / MiB,
      baseline: balloonFreed[1] / MiB,
      unit: "MiB",
    },
    {
      name: "a cold boot's anonymous memory 20 s after its agent started: RAM file mapped privately vs anonymous RAM",
      ours: cold.after.anon / MiB,
      baseline: coldAnon.after.anon / MiB,
      unit: "MiB",
    },
  ];
  console.log("| measurement | ours | baseline | ratio | target |\n|---|---|---|---|---|");
  const label = `QEMU ${major}.${minor}`;
  for (const row of rows) {
    const ratio = row.ours / row.baseline;
    console.log(
      `| ${row.name} | ${row.ours.toFixed(0)} MiB | ${row.baseline.toFixed(0)} MiB | ${ratio.toFixed(2)} | ${row.target ?? ""} |`,
    );
    summaryRow({ ...row, name: `${label}: ${row.name}`, ratio: Number(ratio.toFixed(2)) });
  }
} finally {
  for (const child of children) child.kill("SIGKILL");
  fs.rmSync(dir, { recursive: true, force: true });
}
