// Kept checkpoints, rewind and fork of disks, with real qemu-img and qemu-io standing in for
// QEMU's writes and no VM: a kept chain is never merged into, a rewind reads exactly what was kept
// (memory included), a fork shares layers without either side seeing the other's writes, and a
// crash while keeping leaves nothing half made.
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import {
  DiskStore,
  MEMORY_FILE,
  POINTER_FILE,
  SUSPEND_STATE_FILE,
  type DiskPointer,
  type DiskRun,
} from "../src/index.js";
import { CHECKPOINTS_DIR, keepCheckpoint, keptDir, listKept } from "../src/disk/kept-checkpoints.js";
import { fakeImage, hasPattern, qemuIo, tempDir, topLayer } from "./support/helpers.js";

const MiB = 1024 ** 2;

let root: string;
let cleanup: () => Promise<void>;
let dir: string;
const store = new DiskStore();
const switched = async () => undefined;

beforeEach(async () => {
  ({ dir: root, cleanup } = await tempDir("pisb-kept-"));
  dir = path.join(root, "inst");
  await store.createDisk(dir, { image: await fakeImage(path.join(root, "image")), diskGiB: 1 });
  await stopAfterWriting(0, 0x11);
});
afterEach(async () => cleanup());

function pointerOf(disk = dir): DiskPointer {
  return JSON.parse(fs.readFileSync(path.join(disk, POINTER_FILE), "utf8")) as DiskPointer;
}

/** One boot writing `pattern` over MiB number `mib`, then a stop. */
async function stopAfterWriting(mib: number, pattern: number, disk = dir): Promise<void> {
  const run = await store.openRun(disk);
  qemuIo(run.layerPath, `write -P ${pattern} ${mib * MiB} ${MiB}`);
  await run.checkpoint({ grown: true });
}

function reads(mib: number, pattern: number, disk = dir): boolean {
  return hasPattern(topLayer(disk), mib * MiB, MiB, pattern);
}

/** A live checkpoint kept under a label, as `RunningVm.checkpoint({keep})` does. */
async function keepLive(run: DiskRun, label: string) {
  await run.liveCheckpoint({ grown: true, switchLayer: switched });
  return keepCheckpoint(run.dir, run.pointer, { label });
}

test("a kept checkpoint of a stopped disk survives later runs and their merges, and a rewind reads exactly it", async () => {
  const kept = await store.keepCheckpoint(dir, { label: "one" });
  expect(kept).toMatchObject({
    id: expect.stringMatching(/^[0-9a-f]{12}$/),
    label: "one",
    memory: false,
    pinned: false,
  });
  for (const pattern of [0x22, 0x33]) await stopAfterWriting(0, pattern);
  expect(reads(0, 0x33)).toBe(true);
  // The later runs' layers were not merged into the kept chain: it still reads what it held.
  expect(hasPattern(path.join(keptDir(dir, kept.id), kept.layers.at(-1)!), 0, MiB, 0x11)).toBe(true);
  const before = pointerOf();
  expect(await store.rewind(dir, kept.id)).toMatchObject({ id: kept.id });
  expect(pointerOf()).toMatchObject({ layers: kept.layers, generation: before.generation + 1 });
  expect(reads(0, 0x11)).toBe(true);
  // Layers only the abandoned state held are gone from the disk directory.
  const files = (await fsp.readdir(dir)).filter((f) => f.endsWith(".qcow2"));
  expect(files.sort()).toEqual([...kept.layers].sort());
  // The disk boots and runs on from there.
  await stopAfterWriting(1, 0x44);
  expect(reads(0, 0x11) && reads(1, 0x44)).toBe(true);
});

test("checkpoints kept while the disk runs hold what the guest had written; list counts shared bytes once", async () => {
  const run = await store.openRun(dir);
  qemuIo(run.activeLayerPath, `write -P 0xa1 ${MiB} ${MiB}`);
  const first = await keepLive(run, "a1");
  qemuIo(run.activeLayerPath, `write -P 0xa2 ${MiB} ${MiB}`);
  const second = await keepLive(run, "a2");
  qemuIo(run.activeLayerPath, `write -P 0xa3 ${MiB} ${MiB}`);
  await run.checkpoint({ grown: true });
  expect(reads(1, 0xa3)).toBe(true);
  const listed = await listKept(dir);
  expect(listed.map((k) => k.label)).toEqual(["a1", "a2"]);
  // The current chain holds both kept chains' layers: they cost nothing more yet.
  expect(listed.map((k) => k.bytes)).toEqual([0, 0]);
  await store.rewind(dir, first.id);
  expect(reads(1, 0xa1)).toBe(true);
  // Now the second one's top layer is held only by it.
  expect((await listKept(dir)).find((k) => k.id === second.id)!.bytes).toBeGreaterThanOrEqual(MiB);
  await store.rewind(dir, second.id);
  expect(reads(1, 0xa2)).toBe(true);
});

test("a memory checkpoint of a suspended disk comes back with its memory, recorded for the new generation", async () => {
  await fsp.writeFile(path.join(dir, MEMORY_FILE), "memory bytes");
  const generation = pointerOf().generation;
  await fsp.writeFile(path.join(dir, SUSPEND_STATE_FILE), JSON.stringify(suspendState(generation)));
  const kept = await store.keepCheckpoint(dir, { memory: true, extra: { door: 1 } });
  expect(kept).toMatchObject({ memory: true, extra: { door: 1 } });
  await store.dropSavedMemory(dir);
  await stopAfterWriting(0, 0x22);
  await store.rewind(dir, kept.id);
  expect(await fsp.readFile(path.join(dir, MEMORY_FILE), "utf8")).toBe("memory bytes");
  const state = JSON.parse(await fsp.readFile(path.join(dir, SUSPEND_STATE_FILE), "utf8"));
  expect(state.generation).toBe(pointerOf().generation);
  // A disk without saved memory cannot keep a memory checkpoint.
  await store.dropSavedMemory(dir);
  await expect(store.keepCheckpoint(dir, { memory: true })).rejects.toMatchObject({ code: "VM_CHECKPOINT_FAILED" });
});

test("a fork shares the source's layers and memory; each side's writes stay its own", async () => {
  await fsp.writeFile(path.join(dir, MEMORY_FILE), "memory bytes");
  await fsp.writeFile(path.join(dir, SUSPEND_STATE_FILE), JSON.stringify(suspendState(pointerOf().generation)));
  const forkDir = path.join(root, "fork");
  const info = await store.fork(dir, forkDir);
  expect(info).toMatchObject({ kind: "instance", generation: 0, layers: pointerOf().layers });
  expect(info.memoryBytes).toBeGreaterThan(0);
  expect(fs.statSync(path.join(forkDir, info.layers[0]!)).ino).toBe(fs.statSync(path.join(dir, info.layers[0]!)).ino);
  await store.dropSavedMemory(dir);
  await stopAfterWriting(0, 0x22);
  await stopAfterWriting(0, 0x33, forkDir);
  expect(reads(0, 0x22)).toBe(true);
  expect(reads(0, 0x33, forkDir)).toBe(true);
  // The fork's memory link survives the source dropping its own.
  expect(fs.existsSync(path.join(forkDir, MEMORY_FILE))).toBe(true);
});

test("a fork of a kept checkpoint reads the checkpoint, its memory too, while the source runs on", async () => {
  await fsp.writeFile(path.join(dir, MEMORY_FILE), "memory bytes");
  await fsp.writeFile(path.join(dir, SUSPEND_STATE_FILE), JSON.stringify(suspendState(pointerOf().generation)));
  const withMemory = await store.keepCheckpoint(dir, { memory: true });
  const diskOnly = await store.keepCheckpoint(dir, {});
  await store.dropSavedMemory(dir);
  const run = await store.openRun(dir);
  qemuIo(run.layerPath, `write -P 0x22 0 ${MiB}`);
  const [memoryFork, diskFork] = [path.join(root, "fork-memory"), path.join(root, "fork-disk")];
  // The source holds its disk: a fork of it now is refused, one of its checkpoint is not.
  await expect(store.fork(dir, path.join(root, "refused"))).rejects.toMatchObject({ code: "VM_DISK_BUSY" });
  expect(await store.fork(dir, memoryFork, { checkpoint: withMemory.id })).toMatchObject({
    generation: 0,
    layers: withMemory.layers,
    memoryBytes: expect.any(Number),
  });
  expect(await fsp.readFile(path.join(memoryFork, MEMORY_FILE), "utf8")).toBe("memory bytes");
  expect(JSON.parse(await fsp.readFile(path.join(memoryFork, SUSPEND_STATE_FILE), "utf8")).generation).toBe(0);
  expect((await store.fork(dir, diskFork, { checkpoint: diskOnly.id })).memoryBytes).toBe(0);
  await run.checkpoint({ grown: true });
  expect(reads(0, 0x22)).toBe(true);
  for (const fork of [memoryFork, diskFork]) {
    expect(reads(0, 0x11, fork)).toBe(true);
    await stopAfterWriting(1, 0x33, fork);
    expect(reads(1, 0x33, fork) && !reads(1, 0x33)).toBe(true);
  }
  await expect(store.fork(dir, path.join(root, "none"), { checkpoint: "0123456789ab" })).rejects.toMatchObject({
    code: "VM_CHECKPOINT_NOT_FOUND",
  });
});

test("removing a kept checkpoint frees its layers and merges the chain it held apart", async () => {
  const kept = await store.keepCheckpoint(dir, {});
  await stopAfterWriting(0, 0x22);
  expect(pointerOf().layers.length).toBeGreaterThan(kept.layers.length);
  await store.removeCheckpoint(dir, kept.id);
  expect(fs.existsSync(keptDir(dir, kept.id))).toBe(false);
  expect(pointerOf().layers).toHaveLength(1);
  expect(reads(0, 0x22)).toBe(true);
  await expect(store.removeCheckpoint(dir, kept.id)).rejects.toMatchObject({ code: "VM_CHECKPOINT_NOT_FOUND" });
  await expect(store.rewind(dir, "../../etc")).rejects.toMatchObject({ code: "VM_CHECKPOINT_NOT_FOUND" });
});

test("a keep interrupted before its rename leaves a temp directory the next keep removes, never a checkpoint", async () => {
  const temp = path.join(dir, CHECKPOINTS_DIR, ".tmp-0123456789ab");
  await fsp.mkdir(temp, { recursive: true });
  await fsp.writeFile(path.join(temp, "checkpoint.json"), "{}");
  expect(await listKept(dir)).toEqual([]);
  await store.keepCheckpoint(dir, {});
  expect(fs.existsSync(temp)).toBe(false);
  expect(await listKept(dir)).toHaveLength(1);
});

function suspendState(generation: number) {
  return {
    version: 1,
    generation,
    bytes: 12,
    savedAt: new Date().toISOString(),
    machine: {
      qemu: "QEMU emulator version 7.2.22",
      accel: "tcg",
      machineType: "q35",
      cpu: "max",
      memory: "2048M",
      cpus: 1,
      image: "kernel|initrd|rootfs",
      gondolin: "0.12.0",
    },
  };
}

test("a caller may choose the id beforehand; a taken or malformed one is refused before anything is written", async () => {
  const kept = await store.keepCheckpoint(dir, { id: "0123456789ab" });
  expect(kept.id).toBe("0123456789ab");
  await expect(store.keepCheckpoint(dir, { id: "0123456789ab" })).rejects.toMatchObject({
    code: "VM_CHECKPOINT_FAILED",
  });
  await expect(store.keepCheckpoint(dir, { id: "../../x" })).rejects.toMatchObject({ code: "VM_CHECKPOINT_NOT_FOUND" });
  expect((await listKept(dir)).map((k) => k.id)).toEqual(["0123456789ab"]);
});
