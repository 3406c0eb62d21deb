#!/usr/bin/env node
// On-demand probe (not in `npm run bench`; needs a build): how fast could `cp` move a large file
// if its bytes went through a raw file the host shares with the guest as a virtio-blk drive (a
// "transfer disk") instead of Gondolin's TCP stream? A QEMU shim on PATH adds the drive (a sparse
// raw file in the VM's run directory, serial `pisb-probe`: larger than, and apart from, the 64 MiB
// transfer disk every VM now has) to the VM the vm package boots; the
// host writes SIZE_MIB MiB of random bytes into it, and python3 in the guest reads them with
// O_DIRECT and writes a file, then the reverse (the guest reads the file and writes the drive with
// O_DIRECT, the host reads the raw file back). Each phase is timed on its own, in one thread, so
// the costs add up: the drive, the sha256 the agent computes for every copy, the file. Both ways
// are checked against the host's sha256 of the data.
// Image: PI_SANDBOX_TEST_IMAGE. Rounds: PROBE_ROUNDS (default 2). Size: SIZE_MIB (default 100).
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const image = process.env.PI_SANDBOX_TEST_IMAGE;
if (!image) throw new Error("set PI_SANDBOX_TEST_IMAGE to a guest image build directory");
const MiB = 1024 ** 2;
const sizeMiB = Number(process.env.SIZE_MIB ?? 100);
const rounds = Number(process.env.PROBE_ROUNDS ?? 2);
const size = sizeMiB * MiB;
const driveMiB = sizeMiB + 16;

const work = fs.mkdtempSync(path.join(os.tmpdir(), "pisb-xferprobe-"));
process.env.GONDOLIN_SESSIONS_DIR = path.join(work, "sessions");
process.env.XDG_CACHE_HOME = path.join(work, "cache");

// The shim: finds the run dir as the vm package's wrapper does (from the virtiocon0 socket), adds
// the drive after Gondolin's devices (so the root disk keeps vda), and execs the real QEMU.
const qemuName = `qemu-system-${process.arch === "arm64" ? "aarch64" : "x86_64"}`;
const realQemu = (process.env.PATH ?? "")
  .split(path.delimiter)
  .map((dir) => path.join(dir, qemuName))
  .find((candidate) => fs.existsSync(candidate));
if (!realQemu) throw new Error(`${qemuName} is not on PATH`);
const shimDir = path.join(work, "bin");
fs.mkdirSync(shimDir);
fs.writeFileSync(
  path.join(shimDir, qemuName),
  [
    "#!/bin/sh",
    "run= prev= dev=",
    'for arg in "$@"; do',
    '  case "$arg" in socket,id=virtiocon0,path=*) p="${arg#socket,id=virtiocon0,path=}"; p="${p%%,*}"; run="${p%/*}" ;; esac',
    '  if [ "$prev" = -machine ]; then',
    '    case "$arg" in microvm*) dev=virtio-blk-device ;; q35*|pc*|virt*) dev=virtio-blk-pci ;; esac',
    "  fi",
    '  prev="$arg"',
    "done",
    'if [ -n "$run" ] && [ -n "$dev" ]; then',
    `  truncate -s ${driveMiB}M "$run/probe.raw" && echo "$run/probe.raw" > ${path.join(work, "raw-path")}`,
    '  set -- "$@" -drive "file=$run/probe.raw,format=raw,if=none,id=pisbxfer" -device "$dev,drive=pisbxfer,serial=pisb-probe"',
    "fi",
    `exec ${realQemu} "$@"`,
    "",
  ].join("\n"),
  { mode: 0o755 },
);
process.env.PATH = `${shimDir}${path.delimiter}${process.env.PATH}`;

const GUEST = String.raw`
import glob, hashlib, mmap, os, sys, time
mode, size, path, algo = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
dev = next('/dev/' + s.split('/')[3] for s in glob.glob('/sys/block/*/serial') if open(s).read().strip() == 'pisb-probe')
piece = 1 << 20
buf = mmap.mmap(-1, piece)  # page-aligned, as O_DIRECT needs
h = hashlib.new(algo) if algo != 'none' else None
t = {'drive': 0.0, 'hash': 0.0, 'file': 0.0}
start = time.monotonic()
def timed(phase, fn, *args):
    a = time.monotonic(); r = fn(*args); t[phase] += time.monotonic() - a; return r
if mode == 'in':
    drive = os.open(dev, os.O_RDONLY | os.O_DIRECT)
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    done = 0
    while done < size:
        k = min(timed('drive', os.preadv, drive, [buf], done), size - done)
        view = memoryview(buf)[:k]
        if h: timed('hash', h.update, view)
        timed('file', os.write, out, view)
        done += k
    timed('file', os.fsync, out)
else:
    drive = os.open(dev, os.O_WRONLY | os.O_DIRECT)
    src = os.open(path, os.O_RDONLY)
    done = 0
    while done < size:
        k = timed('file', os.readv, src, [buf])
        if k == 0: break
        if h: timed('hash', h.update, memoryview(buf)[:k])
        timed('drive', os.pwritev, drive, [buf], done)
        done += k
    timed('drive', os.fsync, drive)
total = time.monotonic() - start
print(h.hexdigest() if h else '-', '%.3f %.3f %.3f %.3f' % (total, t['drive'], t['hash'], t['file']))
`;

const { DiskStore, startVm, runInGuest } = await import("../dist/index.js");
const stateRoot = path.join(work, "state");
const diskDir = path.join(work, "disk");
await new DiskStore({ stateRoot }).createDisk(diskDir, { image, diskGiB: 2 });
const spec = { resources: { cpus: 2, memoryGiB: 1 }, network: { allowedHosts: [] } };
const vm = await startVm({ name: "xferprobe", diskDir, stateRoot, spec, startTimeoutMs: 600_000 });
const rows = [];
try {
  const sh = async (script) => {
    const result = await runInGuest(vm, script);
    if (result.exitCode !== 0) throw new Error(`${script}: ${result.stderr}`);
    return result.stdout.trim();
  };
  await sh(`echo ${Buffer.from(GUEST).toString("base64")} | base64 -d > /tmp/probe.py`);
  const raw = fs.readFileSync(path.join(work, "raw-path"), "utf8").trim();
  const data = crypto.randomBytes(size);
  const want = crypto.createHash("sha256").update(data).digest("hex");
  const fd = fs.openSync(raw, "r+");
  const rate = (seconds) => (seconds > 0 ? (sizeMiB / seconds).toFixed(1) : "-");
  const row = (direction, algo, host, out) => {
    const [sum, total, drive, hash, file] = out.split(" ");
    const [t, d, h, f] = [total, drive, hash, file].map(Number);
    if (algo === "sha256" && sum !== want) throw new Error(`${direction}: the guest's sha256 is not the data's`);
    rows.push({
      direction,
      algo,
      load: os.loadavg()[0].toFixed(1),
      guest: rate(t),
      drive: rate(d),
      hash: rate(h),
      file: rate(f),
      host: rate(host),
    });
  };
  for (let round = 0; round < rounds; round += 1) {
    for (const algo of ["sha256", "none"]) {
      let started = performance.now();
      fs.writeSync(fd, data, 0, size, 0);
      const hostIn = (performance.now() - started) / 1000;
      row("into the guest", algo, hostIn, await sh(`python3 /tmp/probe.py in ${size} /root/probe.bin ${algo}`));
      fs.ftruncateSync(fd, 0);
      fs.ftruncateSync(fd, driveMiB * MiB);
      const out = await sh(`python3 /tmp/probe.py out ${size} /root/probe.bin ${algo}`);
      started = performance.now();
      const back = Buffer.alloc(size);
      fs.readSync(fd, back, 0, size, 0);
      const hostOut = (performance.now() - started) / 1000;
      if (crypto.createHash("sha256").update(back).digest("hex") !== want)
        throw new Error("out: the drive's bytes are not the data");
      row("out of the guest", algo, hostOut, out);
    }
  }
  fs.closeSync(fd);
} finally {
  await vm.close();
  fs.rmSync(work, { recursive: true, force: true });
}
console.log(
  `${sizeMiB} MiB through a transfer disk, ${vm.accelerator.accel}, ${rounds} rounds (MiB/s; each phase timed alone)`,
);
console.table(rows);
