// Saved memory without a guest: QEMU's migration stream through a file between two wrapped QEMUs
// (the second waits with -incoming defer because of the run dir's marker), a stream QEMU refuses,
// and every reason a saved state is not used.
import { spawn } from "node:child_process";
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { MEMORY_FILE, SUSPEND_STATE_FILE, prepareQemuLauncher } from "../src/index.js";
import { INCOMING_MARKER } from "../src/filenames.js";
import { QmpMonitor } from "../src/host/qmp.js";
import {
  checkSuspendState,
  removeSuspendState,
  restoreMemory,
  saveMemory,
  suspendStateBytes,
  type SavedMachine,
  type SuspendState,
} from "../src/disk/vm-memory.js";
import { tempDir } from "./support/helpers.js";

let dir: string;
let cleanup: () => Promise<void>;
const started: number[] = [];

beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(async () => {
  for (const pid of started.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  await cleanup();
});

/** A wrapped QEMU with 64 MiB and no guest, its run dir `name` (QMP there), the monitor connected. */
async function qemuIn(name: string, options: { incoming?: string } = {}): Promise<QmpMonitor> {
  const launcher = await prepareQemuLauncher(path.join(dir, "bin"));
  const runtime = path.join(dir, name);
  await fsp.mkdir(runtime);
  if (options.incoming !== undefined) await fsp.writeFile(path.join(runtime, INCOMING_MARKER), options.incoming);
  const chardev = `socket,id=virtiocon0,path=${runtime}/ctl.sock,server=on,wait=off`;
  const args = ["-machine", "q35", "-accel", "tcg", "-m", "64", "-nodefaults", "-display", "none", "-S"];
  const qemu = spawn(launcher.qemuPath, [...args, "-chardev", chardev], { stdio: "ignore" });
  await new Promise((resolve) => qemu.once("spawn", resolve));
  started.push(qemu.pid!);
  const monitor = new QmpMonitor(path.join(runtime, "qmp.sock"), {
    onIoErrorPause: () => undefined,
    connectTimeoutMs: 10_000,
  });
  await expect(monitor.connected).resolves.toBe(true);
  return monitor;
}

test("a QEMU's state goes into a file and into a QEMU waiting for it, which then runs", async () => {
  const source = await qemuIn("src");
  const file = path.join(dir, "memory");
  const saved = await saveMemory(source, path.join(dir, "src"), file, 30_000);
  expect(saved.bytes).toBe(fs.statSync(file).size);
  expect(saved.bytes).toBeGreaterThan(0);
  // Zero pages are not written: far less than the 64 MiB of RAM.
  expect(saved.bytes).toBeLessThan(16 * 1024 * 1024);
  expect(fs.statSync(file).mode & 0o077).toBe(0);
  source.close();

  const target = await qemuIn("dst", { incoming: file });
  expect(await target.status()).toBe("inmigrate");
  let seeded = false;
  await restoreMemory(target, 30_000, () => {
    seeded = true;
  });
  expect(seeded).toBe(true);
  expect(await target.status()).toBe("running");
  target.close();
}, 60_000);

test("a stream QEMU refuses is VM_RESTORE_FAILED", async () => {
  const file = path.join(dir, "memory");
  await fsp.writeFile(file, Buffer.alloc(64 * 1024, 0x5a));
  const target = await qemuIn("dst", { incoming: file });
  await expect(restoreMemory(target, 30_000, () => undefined)).rejects.toMatchObject({
    code: "VM_RESTORE_FAILED",
  });
  target.close();
}, 60_000);

test("a memory file that is gone by the time QEMU starts is VM_RESTORE_FAILED (QEMU reads /dev/null), not a failed start", async () => {
  const target = await qemuIn("dst", { incoming: path.join(dir, "no-such-memory") });
  expect(await target.status()).toBe("inmigrate");
  await expect(restoreMemory(target, 30_000, () => undefined)).rejects.toMatchObject({
    code: "VM_RESTORE_FAILED",
  });
  target.close();
}, 60_000);

const machine: SavedMachine = {
  qemu: "QEMU emulator version 7.2.22",
  accel: "tcg",
  machineType: "q35",
  cpu: "max",
  memory: "1024M",
  cpus: 1,
  image: "/img/vmlinuz:1:2|/img/initrd:3:4|/img/rootfs:5:6",
  gondolin: "0.12.0",
  devices: "balloon(free-page-reporting)",
};

async function saveState(state: Partial<SuspendState> = {}, bytes = 1000): Promise<void> {
  await fsp.writeFile(path.join(dir, MEMORY_FILE), Buffer.alloc(bytes));
  const record: SuspendState = { version: 1, generation: 4, bytes: 1000, savedAt: "now", machine, ...state };
  await fsp.writeFile(path.join(dir, SUSPEND_STATE_FILE), JSON.stringify(record));
}

test("a saved state is used only with its checkpoint, its whole file and the same machine; otherwise the reason", async () => {
  expect(await checkSuspendState(dir, 4, machine)).toBeUndefined();
  await saveState();
  expect(await checkSuspendState(dir, 4, machine)).toMatchObject({ usable: true, state: { generation: 4 } });
  expect(await suspendStateBytes(dir)).toBeGreaterThan(0);
  const reason = async (generation: number, now: Partial<SavedMachine>) =>
    ((await checkSuspendState(dir, generation, { ...machine, ...now })) as { reason?: string }).reason;
  expect(await reason(3, {})).toBe("the saved memory belongs to another disk checkpoint");
  expect(await reason(4, { qemu: "QEMU emulator version 8.2.0" })).toBe(
    "QEMU changed (saved by QEMU emulator version 7.2.22, now QEMU emulator version 8.2.0)",
  );
  expect(await reason(4, { accel: "kvm", machineType: "microvm", cpu: "host" })).toBe(
    "the accelerator or CPU model changed (saved on tcg/q35/max, now kvm/microvm/host)",
  );
  expect(await reason(4, { cpu: "host" })).toMatch(/^the accelerator or CPU model changed/);
  expect(await reason(4, { memory: "2048M" })).toBe("the memory size or CPU count changed");
  expect(await reason(4, { image: "/img/vmlinuz:9:9|/img/initrd:3:4|/img/rootfs:5:6" })).toBe(
    "the guest image changed",
  );
  expect(await reason(4, { gondolin: "0.13.0" })).toBe("the Gondolin version changed");
  expect(await reason(4, { devices: "balloon,rng" })).toBe(
    "the VM's devices changed (saved with balloon(free-page-reporting), now balloon,rng)",
  );
  // A state saved before the wrapper added devices records none: it cannot load into a VM with them.
  await saveState({ machine: { ...machine, devices: undefined } });
  expect(await reason(4, {})).toBe("the VM's devices changed (saved with none, now balloon(free-page-reporting))");
  await saveState();

  await saveState({}, 999);
  expect(await reason(4, {})).toBe("the memory file is truncated or changed");
  await fsp.rm(path.join(dir, MEMORY_FILE));
  expect(await reason(4, {})).toBe("the memory file is missing");
  await fsp.writeFile(path.join(dir, SUSPEND_STATE_FILE), "{not json");
  expect(await reason(4, {})).toBe("the record of the suspend is unreadable");
  await saveState({ vfs: { nextIno: 3, entries: [[1, [7 as unknown as string]]] } });
  expect(await reason(4, {})).toBe("the record of the suspend is unreadable");

  await removeSuspendState(dir);
  await fsp.writeFile(path.join(dir, MEMORY_FILE), "orphan");
  expect(await reason(4, {})).toBe("the memory file has no record of its suspend");
  await removeSuspendState(dir);
  expect(await suspendStateBytes(dir)).toBe(0);
  expect(await checkSuspendState(dir, 4, machine)).toBeUndefined();
});
