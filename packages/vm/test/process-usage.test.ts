// What inspect and list report as a running QEMU's cost: CPU share and resident memory read from
// /proc by the QEMU's pid record, and nothing for a record whose pid now names another process.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { QEMU_PID_FILE } from "../src/filenames.js";
import { processStartTime } from "../src/process-util.js";
import {
  cpuPercent,
  processUsage,
  qemuResidentMemory,
  qemuUsage,
  residentMemoryOf,
} from "../src/host/process-usage.js";

const linux = process.platform === "linux";
let dir: string;
beforeEach(async () => (dir = await mkdtemp(path.join(tmpdir(), "usage-"))));
afterEach(() => rm(dir, { recursive: true, force: true }));

(linux ? test : test.skip)("a busy process reads as using CPU, and its resident memory as Node reports it", () => {
  const before = processUsage(process.pid)!;
  // Spin until /proc has counted 100 ms of CPU (on a loaded host that takes longer than 100 ms).
  const deadline = performance.now() + 10_000;
  while (processUsage(process.pid)!.cpuMs - before.cpuMs < 100 && performance.now() < deadline) {
    for (let i = 0; i < 1e5; i++) Math.sqrt(i);
  }
  const after = processUsage(process.pid)!;
  expect(after.cpuMs - before.cpuMs).toBeGreaterThanOrEqual(100);
  expect(cpuPercent(before, after)).toBeGreaterThan(0);
  expect(cpuPercent(before, after)).toBeLessThanOrEqual(
    ((after.cpuMs - before.cpuMs) / (after.at - before.at)) * 100 + 0.1,
  );
  const rss = process.memoryUsage.rss();
  expect(after.rssBytes).toBeGreaterThan(rss * 0.8);
  expect(after.rssBytes).toBeLessThan(rss * 1.2);
});

(linux ? test : test.skip)("a QEMU pid record leads to that process's cost; a reused pid leads to none", async () => {
  const record = { pid: process.pid, ownerPid: process.pid, dir, startTime: processStartTime(process.pid) };
  await writeFile(path.join(dir, QEMU_PID_FILE), JSON.stringify(record));
  expect((await qemuUsage(dir))?.rssBytes).toBeGreaterThan(0);
  await writeFile(path.join(dir, QEMU_PID_FILE), JSON.stringify({ ...record, startTime: "1" }));
  expect(await qemuUsage(dir)).toBeUndefined();
});

test("a disk with no QEMU running has no cost to report", async () => {
  expect(await qemuUsage(dir)).toBeUndefined();
});

/** One smaps entry: its header line, then the fields read here and one that is not. */
function mapping(start: number, sizeMiB: number, perms: string, inode: number, name: string, rssKiB: number): string {
  const hex = (n: number) => n.toString(16).padStart(12, "0");
  return [
    `${hex(start)}-${hex(start + sizeMiB * 2 ** 20)} ${perms} 00000000 ${inode ? "fe:01" : "00:00"} ${inode}${name ? `   ${name}` : ""}`,
    `Size:           ${sizeMiB * 1024} kB`,
    `Rss:            ${rssKiB} kB`,
    `Pss:            ${rssKiB} kB`,
    "VmFlags: rd wr mr mw me ac sd",
  ].join("\n");
}

test("a QEMU's resident memory splits into the guest's RAM, the translation cache and the rest", () => {
  const at = (i: number) => 0x7f0000000000 + i * 2 ** 32;
  const smaps = [
    mapping(at(0), 6, "r-xp", 4242, "/usr/bin/qemu-system-x86_64", 5 * 1024), // QEMU's code
    mapping(at(1), 20, "rw-p", 0, "[heap]", 6 * 1024),
    mapping(at(2), 2048, "rw-p", 0, "", 210 * 1024), // the guest's 2 GiB
    mapping(at(3), 1024, "rwxp", 0, "", 130 * 1024), // TCG's code buffer
    mapping(at(4), 20, "rw-p", 0, "", 17 * 1024), // QEMU's own anonymous memory
    mapping(at(5), 0.0078125, "r-xp", 0, "[vdso]", 8),
  ].join("\n");
  expect(residentMemoryOf(smaps)).toEqual({
    guestBytes: 210 * 2 ** 20,
    translationCacheBytes: 130 * 2 ** 20,
    otherBytes: (5 + 6 + 17) * 2 ** 20 + 8 * 1024,
  });

  // Under KVM there is no code buffer; with TCG's split W^X the cache is a memfd's executable view.
  const kvm = [mapping(at(2), 2048, "rw-p", 0, "", 300 * 1024), mapping(at(4), 20, "rw-p", 0, "", 17 * 1024)];
  expect(residentMemoryOf(kvm.join("\n"))).toEqual({
    guestBytes: 300 * 2 ** 20,
    translationCacheBytes: 0,
    otherBytes: 17 * 2 ** 20,
  });
  const splitWx = [...kvm, mapping(at(3), 1024, "r-xp", 77, "/memfd:tcg-jit (deleted)", 64 * 1024)];
  expect(residentMemoryOf(splitWx.join("\n"))?.translationCacheBytes).toBe(64 * 2 ** 20);

  expect(residentMemoryOf("")).toBeUndefined();
});

test("a disk with no QEMU running has no resident memory to sort", async () => {
  expect(await qemuResidentMemory(dir)).toBeUndefined();
});
