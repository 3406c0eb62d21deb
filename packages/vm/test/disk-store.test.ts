// Instance and template disks as qcow2 chains, with real qemu-img and no VM: a stop's writes kept
// or dropped as one checkpoint, one run at a time, independent instances from a template, crash states.
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { spawn } from "node:child_process";
import { DiskStore, isVmError, MEMORY_FILE, POINTER_FILE, SUSPEND_STATE_FILE } from "../src/index.js";
import { TS_NODE_ARGS, fakeImage, hasPattern, qemuIo, tempDir, topLayer, virtualSize } from "./support/helpers.js";

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

let root: string;
let cleanup: () => Promise<void>;
let image: string;
const store = new DiskStore();
const SAVED_MACHINE = {
  qemu: "QEMU emulator version 7.2.22",
  accel: "tcg",
  machineType: "q35",
  cpu: "max",
  memory: "2048M",
  cpus: 1,
  image: "kernel|initrd|rootfs",
  gondolin: "0.12.0",
};

beforeEach(async () => {
  ({ dir: root, cleanup } = await tempDir());
  image = await fakeImage(path.join(root, "image"));
});
afterEach(async () => cleanup());

function pointerOf(dir: string): { layers: string[]; generation: number; grown: boolean; kind: string } {
  return JSON.parse(fs.readFileSync(path.join(dir, POINTER_FILE), "utf8"));
}

/** Simulates one boot that writes `pattern` at `offset`, then a completed stop. */
async function runAndWrite(dir: string, offset: number, pattern: number, length = MiB) {
  const run = await store.openRun(dir);
  qemuIo(run.layerPath, `write -P ${pattern} ${offset} ${length}`);
  return run.checkpoint({ grown: true });
}

describe("createDisk", () => {
  test("makes a sparse qcow2 of diskGiB backed by the image rootfs", async () => {
    const dir = path.join(root, "inst");
    const info = await store.createDisk(dir, { image, diskGiB: 2 });
    expect(info.sizeBytes).toBe(2 * GiB);
    expect(info.kind).toBe("instance");
    expect(info.grown).toBe(false);
    expect(info.layers).toHaveLength(1);
    expect(virtualSize(topLayer(dir))).toBe(2 * GiB);
    expect(info.allocatedBytes).toBeLessThan(2 * MiB);
    expect(info.image.rootfsPath).toBe(path.join(image, "rootfs.ext4"));
  });

  test("refuses a second disk in the same directory", async () => {
    const dir = path.join(root, "inst");
    await store.createDisk(dir, { image, diskGiB: 1 });
    await expect(store.createDisk(dir, { image, diskGiB: 1 })).rejects.toMatchObject({ code: "VM_DISK_EXISTS" });
  });

  test("names the missing image file", async () => {
    await fsp.rm(path.join(image, "initramfs.cpio.lz4"));
    const error = await store.createDisk(path.join(root, "inst"), { image, diskGiB: 1 }).catch((e: unknown) => e);
    expect(isVmError(error, "VM_IMAGE_NOT_FOUND")).toBe(true);
    expect((error as Error).message).toContain(path.join(image, "initramfs.cpio.lz4"));
  });

  test("refuses a relative image path and a disk smaller than the image", async () => {
    await expect(store.createDisk(path.join(root, "a"), { image: "image", diskGiB: 1 })).rejects.toMatchObject({
      code: "VM_IMAGE_NOT_FOUND",
    });
    await expect(store.createDisk(path.join(root, "b"), { image, diskGiB: 0.03 })).rejects.toMatchObject({
      code: "VM_RESOURCES_UNSUPPORTED",
    });
    await expect(store.createDisk(path.join(root, "c"), { image, diskGiB: -1 })).rejects.toMatchObject({
      code: "VM_RESOURCES_UNSUPPORTED",
    });
  });

  test("a creation that crashed before its pointer leaves no disk, and can be redone", async () => {
    const dir = path.join(root, "inst");
    await fsp.mkdir(dir);
    await fsp.writeFile(path.join(dir, "layer-0123456789abcdef.qcow2"), "half-written");
    expect(await store.exists(dir)).toBe(false);
    await store.createDisk(dir, { image, diskGiB: 1 });
    expect(fs.existsSync(path.join(dir, "layer-0123456789abcdef.qcow2"))).toBe(false);
  });
});

describe("runs and checkpoints", () => {
  test("a checkpoint makes the run's writes current; a discard drops them", async () => {
    const dir = path.join(root, "inst");
    await store.createDisk(dir, { image, diskGiB: 1 });
    await runAndWrite(dir, 0, 0xaa);
    expect(hasPattern(topLayer(dir), 0, MiB, 0xaa)).toBe(true);
    expect(pointerOf(dir).generation).toBe(1);
    expect(pointerOf(dir).grown).toBe(true);

    const run = await store.openRun(dir);
    qemuIo(run.layerPath, `write -P 0xbb 0 ${MiB}`);
    await run.discard();
    expect(hasPattern(topLayer(dir), 0, MiB, 0xaa)).toBe(true);
    expect(fs.existsSync(run.layerPath)).toBe(false);
    expect(pointerOf(dir).generation).toBe(1);
  });

  test("an exclusive chain is merged back to one layer at every stop", async () => {
    const dir = path.join(root, "inst");
    await store.createDisk(dir, { image, diskGiB: 1 });
    for (let i = 0; i < 3; i += 1) {
      const result = await runAndWrite(dir, i * MiB, 0x10 + i);
      expect(result.layers).toHaveLength(1);
      expect(result.compactError).toBeUndefined();
    }
    const layerFiles = fs.readdirSync(dir).filter((f) => f.startsWith("layer-"));
    expect(layerFiles).toHaveLength(1);
    for (let i = 0; i < 3; i += 1) expect(hasPattern(topLayer(dir), i * MiB, MiB, 0x10 + i)).toBe(true);
  });

  test("a second open of a running disk fails with VM_DISK_BUSY until the run ends", async () => {
    const dir = path.join(root, "inst");
    await store.createDisk(dir, { image, diskGiB: 1 });
    const run = await store.openRun(dir);
    await expect(store.openRun(dir)).rejects.toMatchObject({ code: "VM_DISK_BUSY" });
    await expect(store.destroy(dir)).rejects.toMatchObject({ code: "VM_DISK_BUSY" });
    await expect(store.createTemplate(dir, path.join(root, "tpl"))).rejects.toMatchObject({ code: "VM_DISK_BUSY" });
    await run.discard();
    const again = await store.openRun(dir);
    await again.discard();
  });

  test("dropSavedMemory deletes a suspend's memory and state (and is refused while the disk runs)", async () => {
    const dir = path.join(root, "inst");
    await store.createDisk(dir, { image, diskGiB: 1 });
    fs.writeFileSync(path.join(dir, MEMORY_FILE), Buffer.alloc(MiB));
    fs.writeFileSync(path.join(dir, SUSPEND_STATE_FILE), "{}");
    expect((await store.inspect(dir)).memoryBytes).toBeGreaterThanOrEqual(MiB);
    const run = await store.openRun(dir);
    await expect(store.dropSavedMemory(dir)).rejects.toMatchObject({ code: "VM_DISK_BUSY" });
    await run.discard();
    await store.dropSavedMemory(dir);
    expect(fs.existsSync(path.join(dir, MEMORY_FILE))).toBe(false);
    expect(fs.existsSync(path.join(dir, SUSPEND_STATE_FILE))).toBe(false);
    expect((await store.inspect(dir)).memoryBytes).toBe(0);
    await store.dropSavedMemory(dir); // nothing saved: nothing to do
  });

  test("a lock left by a dead process is taken over, and the dead run's writes are the new checkpoint", async () => {
    const dir = path.join(root, "inst");
    await store.createDisk(dir, { image, diskGiB: 1 });
    // A process that takes the disk, writes into its run layer and is SIGKILLed before its stop.
    const script = `
      const { DiskStore } = await import(${JSON.stringify(path.resolve("src/index.ts"))});
      const run = await new DiskStore().openRun(${JSON.stringify(dir)});
      console.log(run.layerPath);
      setInterval(() => {}, 1000);
    `;
    const child = spawn(process.execPath, [...TS_NODE_ARGS, "--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const layerPath = await new Promise<string>((resolve, reject) => {
      child.stdout.once("data", (d) => resolve(String(d).trim()));
      child.once("exit", (code) => reject(new Error(`helper exited early (${code})`)));
    });
    await expect(store.openRun(dir)).rejects.toMatchObject({ code: "VM_DISK_BUSY" });
    qemuIo(layerPath, `write -P 0xab 0 ${MiB}`); // what its QEMU wrote
    child.kill("SIGKILL");
    await new Promise((resolve) => child.once("exit", resolve));
    expect(fs.existsSync(layerPath)).toBe(true);
    const run = await store.openRun(dir);
    expect(run.recovery?.outcome).toBe("recovered");
    expect(pointerOf(dir).generation).toBe(1);
    expect(hasPattern(run.layerPath, 0, MiB, 0xab)).toBe(true);
    // Merged into the disk's own layer, as a stop's run layer is.
    expect(fs.existsSync(layerPath)).toBe(false);
    await run.discard();
  }, 30_000);

  test("a missing layer or a changed image stops the open with a typed error", async () => {
    const dir = path.join(root, "inst");
    await store.createDisk(dir, { image, diskGiB: 1 });
    const rootfs = path.join(image, "rootfs.ext4");
    const later = new Date(Date.now() + 60_000);
    await fsp.utimes(rootfs, later, later);
    await expect(store.openRun(dir)).rejects.toMatchObject({ code: "VM_IMAGE_CHANGED" });
    await fsp.rm(rootfs);
    const error = await store.openRun(dir).catch((e: unknown) => e);
    expect(isVmError(error, "VM_IMAGE_NOT_FOUND")).toBe(true);
    expect((error as Error).message).toContain(rootfs);
    await fsp.rm(topLayer(dir));
    await expect(store.openRun(dir)).rejects.toMatchObject({ code: "VM_DISK_CORRUPT" });
  });

  test("opening a directory without a disk fails with VM_DISK_NOT_FOUND", async () => {
    await expect(store.openRun(path.join(root, "nothing"))).rejects.toMatchObject({ code: "VM_DISK_NOT_FOUND" });
    await fsp.mkdir(path.join(root, "empty"));
    await expect(store.openRun(path.join(root, "empty"))).rejects.toMatchObject({ code: "VM_DISK_NOT_FOUND" });
  });
});

describe("templates", () => {
  test("several instances created from one template at once take turns instead of failing", async () => {
    const source = path.join(root, "source");
    await store.createDisk(source, { image, diskGiB: 1 });
    const template = path.join(root, "tpl");
    await store.createTemplate(source, template);
    const names = ["c1", "c2", "c3", "c4", "c5"];
    const infos = await Promise.all(names.map((n) => store.createFromTemplate(template, path.join(root, n))));
    expect(infos.map((i) => i.kind)).toEqual(names.map(() => "instance"));
  });

  test("instances from a template are independent of it and of each other", async () => {
    const source = path.join(root, "source");
    await store.createDisk(source, { image, diskGiB: 1 });
    await runAndWrite(source, 0, 0x11);
    const template = path.join(root, "tpl");
    const tplInfo = await store.createTemplate(source, template);
    expect(tplInfo.kind).toBe("template");

    const a = path.join(root, "a");
    const b = path.join(root, "b");
    await store.createFromTemplate(template, a);
    await store.createFromTemplate(template, b);
    await runAndWrite(a, MiB, 0xaa);
    await runAndWrite(b, MiB, 0xbb);
    // The source keeps changing after the template was taken: the template must not see it.
    await runAndWrite(source, 0, 0x22);

    expect(hasPattern(topLayer(a), 0, MiB, 0x11)).toBe(true);
    expect(hasPattern(topLayer(a), MiB, MiB, 0xaa)).toBe(true);
    expect(hasPattern(topLayer(b), MiB, MiB, 0xbb)).toBe(true);
    expect(hasPattern(topLayer(template), 0, MiB, 0x11)).toBe(true);

    await store.destroy(template);
    await store.destroy(source);
    expect(fs.existsSync(template)).toBe(false);
    expect(hasPattern(topLayer(a), 0, MiB, 0x11)).toBe(true);
    expect(hasPattern(topLayer(b), 0, MiB, 0x11)).toBe(true);
    // Still usable after the template is gone; the chain stays short and the stop never merges
    // the (now unshared) template layer, whose size has nothing to do with this run.
    await store.destroy(b);
    const before = pointerOf(a).layers;
    expect(fs.statSync(path.join(a, before[0]!)).nlink).toBe(1);
    const result = await runAndWrite(a, 2 * MiB, 0xcc);
    expect(result.layers).toEqual(before);
    expect(hasPattern(topLayer(a), MiB, MiB, 0xaa)).toBe(true);
  });

  test("creating from a template neither copies its data nor depends on its size", async () => {
    const source = path.join(root, "source");
    await store.createDisk(source, { image, diskGiB: 1 });
    await runAndWrite(source, 0, 0x33, 32 * MiB);
    const template = path.join(root, "tpl");
    await store.createTemplate(source, template);
    const info = await store.createFromTemplate(template, path.join(root, "inst"));
    expect(info.allocatedBytes).toBeGreaterThan(32 * MiB);
    expect(info.exclusiveBytes).toBe(0);
  });

  test("a template can grow its instances' disks but never shrink them", async () => {
    const source = path.join(root, "source");
    await store.createDisk(source, { image, diskGiB: 1 });
    await runAndWrite(source, 0, 0x44);
    const template = path.join(root, "tpl");
    await store.createTemplate(source, template);
    const big = await store.createFromTemplate(template, path.join(root, "big"), { diskGiB: 3 });
    expect(big.sizeBytes).toBe(3 * GiB);
    expect(big.grown).toBe(false);
    expect(virtualSize(topLayer(path.join(root, "big")))).toBe(3 * GiB);
    expect(hasPattern(topLayer(path.join(root, "big")), 0, MiB, 0x44)).toBe(true);
    await expect(store.createFromTemplate(template, path.join(root, "small"), { diskGiB: 0.5 })).rejects.toMatchObject({
      code: "VM_RESOURCES_UNSUPPORTED",
    });
  });

  test("a suspended source leaves its memory to the template, and each instance links it for its first start", async () => {
    const source = path.join(root, "source");
    await store.createDisk(source, { image, diskGiB: 1 });
    await runAndWrite(source, 0, 0x55);
    const generation = pointerOf(source).generation;
    await fsp.writeFile(path.join(source, MEMORY_FILE), Buffer.alloc(4096, 7));
    const saved = { version: 1, generation, bytes: 4096, savedAt: "2026-12-03T00:00:00.000Z", machine: SAVED_MACHINE };
    await fsp.writeFile(path.join(source, SUSPEND_STATE_FILE), JSON.stringify(saved));
    await fsp.mkdir(path.join(source, "mitm-ca"));
    await fsp.writeFile(path.join(source, "mitm-ca", "ca.pem"), "the CA the saved guest trusts");
    const template = path.join(root, "tpl");
    expect((await store.createTemplate(source, template)).memoryBytes).toBeGreaterThanOrEqual(4096);
    await store.destroy(source);

    const clones = ["a", "b"].map((n) => path.join(root, n));
    for (const clone of clones) {
      const info = await store.createFromTemplate(template, clone);
      expect(info.memoryBytes).toBeGreaterThanOrEqual(4096);
      const record = JSON.parse(await fsp.readFile(path.join(clone, SUSPEND_STATE_FILE), "utf8"));
      expect(record).toEqual({ ...saved, generation: 0 }); // for the clone's own first checkpoint
      expect(await fsp.readFile(path.join(clone, "mitm-ca", "ca.pem"), "utf8")).toBe("the CA the saved guest trusts");
    }
    // One memory file shared by the template and both clones, never copied.
    const inode = fs.statSync(path.join(template, MEMORY_FILE)).ino;
    expect(clones.map((c) => fs.statSync(path.join(c, MEMORY_FILE)).ino)).toEqual([inode, inode]);
    expect(fs.statSync(path.join(template, MEMORY_FILE)).nlink).toBe(3);
    // A clone's start consumes only its own link; the template keeps its memory for the next.
    await store.destroy(clones[0]!);
    expect(fs.readFileSync(path.join(template, MEMORY_FILE))).toEqual(Buffer.alloc(4096, 7));
    // A larger disk than the saved guest knew boots cold: no memory for it.
    const big = await store.createFromTemplate(template, path.join(root, "big"), { diskGiB: 2 });
    expect(big.memoryBytes).toBe(0);
  });

  test("memory saved for another checkpoint of the source is not passed on", async () => {
    const source = path.join(root, "source");
    await store.createDisk(source, { image, diskGiB: 1 });
    await runAndWrite(source, 0, 0x56);
    await fsp.writeFile(path.join(source, MEMORY_FILE), Buffer.alloc(4096, 7));
    const stale = {
      version: 1,
      generation: 0,
      bytes: 4096,
      savedAt: "2026-12-03T00:00:00.000Z",
      machine: SAVED_MACHINE,
    };
    await fsp.writeFile(path.join(source, SUSPEND_STATE_FILE), JSON.stringify(stale));
    const template = path.join(root, "tpl");
    expect((await store.createTemplate(source, template)).memoryBytes).toBe(0);
    expect(fs.existsSync(path.join(template, MEMORY_FILE))).toBe(false);
  });

  test("templates never boot, and instances are not templates", async () => {
    const source = path.join(root, "source");
    await store.createDisk(source, { image, diskGiB: 1 });
    const template = path.join(root, "tpl");
    await store.createTemplate(source, template);
    await expect(store.openRun(template)).rejects.toMatchObject({ code: "VM_DISK_FAILED" });
    await expect(store.createFromTemplate(source, path.join(root, "x"))).rejects.toMatchObject({
      code: "VM_DISK_FAILED",
    });
    await expect(store.createTemplate(source, template)).rejects.toMatchObject({ code: "VM_DISK_EXISTS" });
  });
});

describe("crash states of a stop", () => {
  test("a stop that died before its pointer flip is finished by the next open, and torn temp files go", async () => {
    const dir = path.join(root, "inst");
    await store.createDisk(dir, { image, diskGiB: 1 });
    await runAndWrite(dir, 0, 0x55);
    const before = pointerOf(dir);
    const run = await store.openRun(dir);
    qemuIo(run.layerPath, `write -P 0x66 0 ${MiB}`);
    // Crash here: simulate by dropping the lock without touching anything else.
    await fsp.rm(path.join(dir, "lock.json"));
    // A torn temp pointer from the interrupted rename.
    await fsp.writeFile(path.join(dir, `.tmp-${POINTER_FILE}-deadbeef`), "{");
    const reopened = await store.openRun(dir);
    expect(reopened.recovery?.outcome).toBe("recovered");
    expect(pointerOf(dir).generation).toBe(before.generation + 1);
    expect(fs.existsSync(run.layerPath)).toBe(false);
    expect(fs.readdirSync(dir).some((f) => f.startsWith(".tmp-"))).toBe(false);
    expect(hasPattern(topLayer(dir), 0, MiB, 0x66)).toBe(true);
    await reopened.discard();
  });

  test("a crash between the flip and the merge keeps the new data, and later stops stay bounded", async () => {
    const dir = path.join(root, "inst");
    await store.createDisk(dir, { image, diskGiB: 1 });
    await runAndWrite(dir, 0, 0x77);
    // Simulate: a run layer was made current by the flip but not merged yet.
    const run = await store.openRun(dir);
    qemuIo(run.layerPath, `write -P 0x88 ${MiB} ${MiB}`);
    const pointer = pointerOf(dir);
    const flipped = { ...pointer, layers: [...pointer.layers, path.basename(run.layerPath)] };
    fs.writeFileSync(path.join(dir, POINTER_FILE), JSON.stringify(flipped));
    await fsp.rm(path.join(dir, "lock.json"));
    expect(hasPattern(topLayer(dir), MiB, MiB, 0x88)).toBe(true);
    const result = await runAndWrite(dir, 2 * MiB, 0x99);
    // The new run merged into the interrupted one; the chain grew by that one layer, no more.
    expect(result.layers).toHaveLength(2);
    expect(fs.readdirSync(dir).filter((f) => f.startsWith("layer-"))).toHaveLength(2);
    for (const [offset, pattern] of [
      [0, 0x77],
      [MiB, 0x88],
      [2 * MiB, 0x99],
    ] as const) {
      expect(hasPattern(topLayer(dir), offset, MiB, pattern)).toBe(true);
    }
  });
});
