// What inspect and list report as a running QEMU's cost: CPU share and resident memory read from
// /proc by the QEMU's pid record, and nothing for a record whose pid now names another process.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { QEMU_PID_FILE } from "../src/filenames.js";
import { processStartTime } from "../src/process-util.js";
import { cpuPercent, processUsage, qemuUsage } from "../src/process-usage.js";

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
