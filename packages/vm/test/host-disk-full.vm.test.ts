// The host file system under a disk fills up while the VM runs (issue #10). The state root is a
// small tmpfs, filled once from inside the guest and twice from the host side. QEMU pauses the
// guest on the refused write; nothing may hang: guest operations and stop fail fast with
// VM_HOST_DISK_FULL naming the full file system, the previous checkpoint stays current and
// `qemu-img check` clean, no QEMU is left, and a start after space was freed works. A stop after
// space was freed resumes the guest and saves its work instead. Four boots, ~2 min under TCG.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { DiskStore, isVmError, runInGuest, startVm, type RunningVm } from "../src/index.js";
import { tempDir } from "./support/helpers.js";
import { memoryLogger, qemuProcessesUsing, sh, testImage, vmOptions } from "./support/vm-support.js";

const MiB = 1024 ** 2;
const TMPFS_MIB = 192;
let root: string;
let cleanup: () => Promise<void>;
let stateRoot: string;
let mounted = false;
let diskDir: string;
let filler: string;
const running = new Set<RunningVm>();
let log = memoryLogger();

beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir("pisb-vmfull-"));
  stateRoot = path.join(root, "state");
  await fsp.mkdir(stateRoot);
  execFileSync("mount", ["-t", "tmpfs", "-o", `size=${TMPFS_MIB}m,mode=0700`, "tmpfs", stateRoot]);
  mounted = true;
  diskDir = path.join(stateRoot, "disk");
  filler = path.join(stateRoot, "filler");
  await new DiskStore({ stateRoot }).createDisk(diskDir, { image: testImage(), diskGiB: 2 });
});

afterAll(async () => {
  await Promise.allSettled([...running].map((vm) => vm.close()));
  if (mounted) {
    try {
      execFileSync("umount", [stateRoot]);
    } catch {
      execFileSync("umount", ["-l", stateRoot]);
    }
  }
  await cleanup();
});

async function boot(name: string): Promise<RunningVm> {
  log = memoryLogger();
  const vm = await startVm(vmOptions(name, diskDir, stateRoot, { logger: log }));
  running.add(vm);
  return vm;
}

function freeBytes(): number {
  const s = fs.statfsSync(stateRoot);
  return s.bavail * s.bsize;
}

/**
 * Fills the tmpfs from the host until `leaveBytes` are free. The guest may be writing back at the
 * same time, so a fallocate sized a moment earlier can fail whole (tmpfs undoes it): size it anew.
 */
function fillHost(leaveBytes: number): void {
  fs.writeFileSync(filler, "");
  for (let attempt = 1; ; attempt += 1) {
    try {
      execFileSync("fallocate", ["-l", String(freeBytes() - leaveBytes), filler], { stdio: "pipe" });
      return;
    } catch (error) {
      if (attempt === 5) throw error;
    }
  }
}

function pointerText(): string {
  return fs.readFileSync(path.join(diskDir, "disk.json"), "utf8");
}

/** `qemu-img check` on every layer the pointer names: no corruption, no leaks. */
function checkLayers(): void {
  const pointer = JSON.parse(pointerText()) as { layers: string[] };
  for (const layer of pointer.layers) {
    execFileSync("qemu-img", ["check", "-q", "-U", "-f", "qcow2", path.join(diskDir, layer)], { stdio: "pipe" });
  }
}

/** Awaits `work`, which must reject with VM_HOST_DISK_FULL within `withinMs`; returns the error. */
async function expectDiskFull(work: Promise<unknown>, withinMs: number): Promise<Error & { details: object }> {
  const started = Date.now();
  const error = await work.then(
    (value) => {
      throw new Error(`expected VM_HOST_DISK_FULL, got ${JSON.stringify(value)}`);
    },
    (e: unknown) => e,
  );
  const took = Date.now() - started;
  if (!isVmError(error, "VM_HOST_DISK_FULL")) throw error;
  expect(took).toBeLessThan(withinMs);
  // The message names the full file system and the hint says what to do.
  expect(error.message).toMatch(new RegExp(`host file system ${stateRoot} (is full|ran out of space)`));
  expect(error.hint).toMatch(/^free space on /);
  expect(error.details).toMatchObject({ mountPoint: stateRoot, dir: diskDir });
  return error;
}

test("the host fills, space is freed before the stop: the guest resumes and its work is saved", async () => {
  const vm = await boot("full");
  // This run's stop makes the checkpoint the next two tests must fall back on.
  await sh(vm, "echo one > /marker && dd if=/dev/urandom of=/a bs=1M count=16 2>/dev/null && sync");
  fillHost(2 * MiB);
  await expectDiskFull(runInGuest(vm, "dd if=/dev/urandom of=/b bs=1M count=24 conv=fsync 2>&1"), 120_000);
  await fsp.rm(filler);
  const result = await vm.stop();
  running.delete(vm);
  expect(result.generation).toBe(1);
  expect(JSON.parse(pointerText())).toMatchObject({ generation: 1 });
  checkLayers();
}, 300_000);

test("the guest fills the host: its commands and stop fail fast with VM_HOST_DISK_FULL; the checkpoint is intact", async () => {
  const before = pointerText();
  const vm = await boot("full");
  expect(vm.fault).toBeUndefined();
  // A TCP stream into the guest, open while the host fills (as a preview's or the agent's is).
  await sh(
    vm,
    'setsid python3 -c \'import socket, time; s = socket.socket(); s.bind(("127.0.0.1", 9200)); s.listen(); open("/tmp/up", "w").close(); c, _ = s.accept(); time.sleep(900)\' >/dev/null 2>&1 & while [ ! -e /tmp/up ]; do sleep 0.1; done',
  );
  const stream = await vm.connectTcp(9200);
  const streamEnd = new Promise<unknown>((resolve) => stream.once("error", resolve));
  // More than the tmpfs holds, well within the guest's own 2 GiB.
  const dd = runInGuest(vm, "dd if=/dev/zero of=/big bs=1M count=400 conv=fsync 2>&1");
  await expectDiskFull(dd, 120_000);
  expect(vm.fault?.code).toBe("VM_HOST_DISK_FULL");
  // Later operations do not wait for the paused guest.
  await expectDiskFull(runInGuest(vm, "true"), 1000);
  await expectDiskFull(vm.readFile("/marker"), 1000);
  await expectDiskFull(vm.connectTcp(9200), 1000);
  // The open stream ended with the fault, rather than waiting for the paused guest.
  await expect(streamEnd).resolves.toMatchObject({ code: "VM_HOST_DISK_FULL" });

  const stopped = await expectDiskFull(vm.stop(), 30_000);
  running.delete(vm);
  expect(stopped.message).toMatch(/previous checkpoint is still current/);
  expect(qemuProcessesUsing(diskDir)).toEqual([]);
  expect(pointerText()).toBe(before);
  checkLayers();
  // The dropped run gave its space back.
  expect(freeBytes()).toBeGreaterThan(100 * MiB);
}, 300_000);

test("the host fills under unsynced guest data: stop fails fast, the checkpoint is intact, a start after freeing space works", async () => {
  const before = pointerText();
  const vm = await boot("full");
  // The first checkpoint, whole; nothing of the dropped run.
  expect(await sh(vm, "cat /marker; stat -c '%n %s' /a /b; test -e /big && echo big; true")).toBe(
    `one\n/a ${16 * MiB}\n/b ${24 * MiB}\n`,
  );
  await sh(vm, "dd if=/dev/urandom of=/c bs=1M count=32 2>/dev/null; echo written");
  fillHost(1 * MiB);
  const error = await expectDiskFull(vm.stop(), 60_000);
  running.delete(vm);
  // It was the stop's own sync that QEMU paused on.
  expect(log.lines.join("\n")).toMatch(/QEMU paused the VM full on a disk write/);
  expect(error.message).toMatch(/previous checkpoint is still current/);
  expect(qemuProcessesUsing(diskDir)).toEqual([]);
  expect(pointerText()).toBe(before);
  checkLayers();

  await fsp.rm(filler);
  const again = await boot("full");
  expect(await sh(again, "cat /marker; stat -c '%n %s' /a /b; test -e /c && echo c; true")).toBe(
    `one\n/a ${16 * MiB}\n/b ${24 * MiB}\n`,
  );
  await again.close();
  running.delete(again);
}, 300_000);
