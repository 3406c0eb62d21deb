// Live checkpoints of a run, with real qemu-img and qemu-io standing in for QEMU's writes and no
// VM: what each publishes, what a stop or discard merges afterwards, what a failure leaves, and
// what the next open recovers after an owner died at each point between a checkpoint's steps.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { DiskStore, POINTER_FILE, QemuImg, RUN_RECORD_FILE, SET_ASIDE_DIR, type DiskRun } from "../src/index.js";
import { topFileOf } from "../src/boot/layer-switch.js";
import { LayerSwitchRefused, writePointer, writeRunRecord, type DiskPointer } from "../src/disk/disk-layout.js";
import { LIVE_CHECKPOINT_LAYERS_MAX } from "../src/disk/disk-run.js";
import { newLayerName } from "../src/filenames.js";
import { defaultQemuImgRunner } from "../src/disk/qemu-img.js";
import { corruptL1, fakeImage, hasPattern, qemuIo, tempDir, topLayer } from "./support/helpers.js";

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;

let root: string;
let cleanup: () => Promise<void>;
let dir: string;
const store = new DiskStore();
/** QEMU switching layers: nothing to do here, qemu-io writes through the active layer's chain. */
const switched = async () => undefined;

beforeEach(async () => {
  ({ dir: root, cleanup } = await tempDir("pisb-live-"));
  dir = path.join(root, "inst");
  await store.createDisk(dir, { image: await fakeImage(path.join(root, "image")), diskGiB: 1 });
  // A first stop, so the disk has a checkpoint of its own (one exclusive layer).
  const first = await store.openRun(dir);
  qemuIo(first.layerPath, `write -P 0x55 0 ${MiB}`);
  await first.checkpoint({ grown: true });
});
afterEach(async () => cleanup());

function pointerOf(): DiskPointer {
  return JSON.parse(fs.readFileSync(path.join(dir, POINTER_FILE), "utf8")) as DiskPointer;
}

function runRecord(): { layer: string; next?: string[]; generation: number; baseLength?: number } | undefined {
  const file = path.join(dir, RUN_RECORD_FILE);
  return fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, "utf8")) : undefined;
}

/** The guest writes `pattern` over MiB number `mib`, through the layer QEMU writes now. */
function guestWrites(run: DiskRun, mib: number, pattern: number): void {
  qemuIo(run.activeLayerPath, `write -P ${pattern} ${mib * MiB} ${MiB}`);
}

/** Whether the disk's current checkpoint reads `pattern` at MiB number `mib`. */
function checkpointHas(mib: number, pattern: number): boolean {
  return hasPattern(topLayer(dir), mib * MiB, MiB, pattern);
}

/** The owner dies (SIGKILL, OOM, power cut): nothing more happens, and its lock is stale. */
async function ownerDies(): Promise<void> {
  await fsp.rm(path.join(dir, "lock.json"));
}

describe("a live checkpoint", () => {
  test("publishes what the guest wrote so far; the stop then merges the run's layers back into one", async () => {
    const before = pointerOf();
    const run = await store.openRun(dir);
    guestWrites(run, 1, 0xa1);
    const first = await run.liveCheckpoint({ grown: true, switchLayer: switched });
    expect(first).toMatchObject({ generation: before.generation + 1, changed: true });
    expect(first.bytes).toBeGreaterThanOrEqual(MiB);
    expect(pointerOf().layers).toEqual([...before.layers, path.basename(run.layerPath)]);
    expect(checkpointHas(1, 0xa1)).toBe(true);
    // QEMU writes a new layer over the one published, and the record names it.
    expect(run.activeLayerPath).not.toBe(run.layerPath);
    expect(runRecord()).toMatchObject({
      layer: path.basename(run.activeLayerPath),
      generation: before.generation + 1,
      baseLength: 1,
    });
    expect(runRecord()?.next).toBeUndefined();

    guestWrites(run, 2, 0xa2);
    const second = await run.liveCheckpoint({ grown: true, switchLayer: switched });
    expect(second.generation).toBe(before.generation + 2);
    expect(pointerOf().layers).toHaveLength(3);
    expect(checkpointHas(2, 0xa2)).toBe(true);

    guestWrites(run, 3, 0xa3);
    const stop = await run.checkpoint({ grown: true });
    expect(stop).toMatchObject({ generation: before.generation + 3, layers: before.layers });
    expect(fs.readdirSync(dir).filter((f) => f.endsWith(".qcow2"))).toEqual(before.layers);
    expect([checkpointHas(0, 0x55), checkpointHas(1, 0xa1), checkpointHas(2, 0xa2), checkpointHas(3, 0xa3)]).toEqual([
      true,
      true,
      true,
      true,
    ]);
  });

  test("with nothing written since the last one, it makes no layer and keeps the generation", async () => {
    const run = await store.openRun(dir);
    const idle = await run.liveCheckpoint({ grown: true, switchLayer: switched });
    expect(idle).toMatchObject({ changed: false, generation: pointerOf().generation, stallMs: 0, bytes: 0 });
    expect(run.activeLayerPath).toBe(run.layerPath);
    guestWrites(run, 1, 0xb1);
    expect((await run.liveCheckpoint({ grown: true, switchLayer: switched })).changed).toBe(true);
    const again = await run.liveCheckpoint({ grown: true, switchLayer: switched });
    expect(again.changed).toBe(false);
    expect(pointerOf().layers).toHaveLength(2);
    await run.discard();
  });

  test("a discard keeps what was checkpointed, drops the rest, and merges the run's layers", async () => {
    const before = pointerOf();
    const run = await store.openRun(dir);
    guestWrites(run, 1, 0xc1);
    await run.liveCheckpoint({ grown: true, switchLayer: switched });
    guestWrites(run, 2, 0xc2);
    await run.discard();
    expect(pointerOf()).toMatchObject({ generation: before.generation + 1, layers: before.layers });
    expect([checkpointHas(1, 0xc1), checkpointHas(2, 0xc2)]).toEqual([true, false]);
    expect(runRecord()).toBeUndefined();
  });

  test("an instance from a template keeps the template's layers shared: only its own are merged", async () => {
    const run = await store.openRun(dir);
    await run.checkpoint({ grown: true });
    const template = path.join(root, "tpl");
    await store.createTemplate(dir, template);
    const clone = path.join(root, "clone");
    await store.createFromTemplate(template, clone);
    const shared = (await store.inspect(clone)).layers;
    const cloneRun = await store.openRun(clone);
    for (const mib of [1, 2]) {
      qemuIo(cloneRun.activeLayerPath, `write -P 0xd${mib} ${mib * MiB} ${MiB}`);
      await cloneRun.liveCheckpoint({ grown: true, switchLayer: switched });
    }
    qemuIo(cloneRun.activeLayerPath, `write -P 0xd3 ${3 * MiB} ${MiB}`);
    const stop = await cloneRun.checkpoint({ grown: true });
    expect(stop.layers).toHaveLength(shared.length + 1);
    expect(stop.layers.slice(0, shared.length)).toEqual(shared);
    const top = path.join(clone, stop.layers.at(-1)!);
    expect([1, 2, 3].map((mib) => hasPattern(top, mib * MiB, MiB, 0xd0 + mib))).toEqual([true, true, true]);
    // The template never changed.
    expect(hasPattern(path.join(template, shared.at(-1)!), MiB, MiB, 0xd1)).toBe(false);
  });

  test("a switch QEMU refused leaves the previous checkpoint and no new layer; the next one works", async () => {
    const before = pointerOf();
    const run = await store.openRun(dir);
    guestWrites(run, 1, 0xe1);
    const refused = run.liveCheckpoint({
      grown: true,
      switchLayer: () => Promise.reject(new LayerSwitchRefused("QMP error GenericError: nope")),
    });
    await expect(refused).rejects.toMatchObject({ code: "VM_CHECKPOINT_FAILED" });
    expect(pointerOf()).toEqual(before);
    expect(runRecord()).toMatchObject({ layer: path.basename(run.layerPath) });
    expect(runRecord()?.next).toBeUndefined();
    expect(fs.readdirSync(dir).filter((f) => f.endsWith(".qcow2"))).toHaveLength(2);
    expect((await run.liveCheckpoint({ grown: true, switchLayer: switched })).generation).toBe(before.generation + 1);
    expect(checkpointHas(1, 0xe1)).toBe(true);
    await run.discard();
  });

  test("a switch without an answer keeps the new layer as written, and the next checkpoint publishes both", async () => {
    const before = pointerOf();
    const run = await store.openRun(dir);
    guestWrites(run, 1, 0xe2);
    const lost = run.liveCheckpoint({ grown: true, switchLayer: () => Promise.reject(new Error("no answer")) });
    await expect(lost).rejects.toMatchObject({ code: "VM_CHECKPOINT_FAILED" });
    expect(pointerOf()).toEqual(before);
    const unsure = run.activeLayerPath;
    expect(runRecord()?.next).toEqual([path.basename(unsure)]);
    // Whether QEMU switched or not, writes land in the chain the run will publish. The next
    // checkpoint switches again first, so nothing QEMU might still write is published.
    guestWrites(run, 2, 0xe3);
    const next = await run.liveCheckpoint({ grown: true, switchLayer: switched });
    expect(run.activeLayerPath).not.toBe(unsure);
    expect(next.generation).toBe(before.generation + 1);
    expect(pointerOf().layers).toHaveLength(3);
    expect([checkpointHas(1, 0xe2), checkpointHas(2, 0xe3)]).toEqual([true, true]);
    await run.checkpoint({ grown: true });
    expect(pointerOf().layers).toEqual(before.layers);
  });

  test("a full host disk leaves the previous checkpoint current and the run going: VM_HOST_DISK_FULL", async () => {
    const before = pointerOf();
    let full = true;
    const real = defaultQemuImgRunner();
    const tight = new DiskStore({
      qemuImg: new QemuImg((args, options) =>
        full && args[0] === "create" && args.includes("-u")
          ? Promise.reject(Object.assign(new Error("exit 1"), { stderr: "qemu-img: No space left on device" }))
          : real(args, options),
      ),
    });
    const run = await tight.openRun(dir);
    guestWrites(run, 1, 0xf1);
    await expect(run.liveCheckpoint({ grown: true, switchLayer: switched })).rejects.toMatchObject({
      code: "VM_HOST_DISK_FULL",
      message: expect.stringContaining("the previous checkpoint is still current"),
    });
    expect(pointerOf()).toEqual(before);
    expect(runRecord()).toMatchObject({ layer: path.basename(run.layerPath) });
    expect(runRecord()?.next).toBeUndefined();
    full = false;
    await run.checkpoint({ grown: true });
    expect(checkpointHas(1, 0xf1)).toBe(true);
  });

  test(`one run adds at most ${LIVE_CHECKPOINT_LAYERS_MAX} layers; then VM_CHECKPOINT_LIMIT, and the stop merges them`, async () => {
    const run = await store.openRun(dir);
    for (let i = 0; i < LIVE_CHECKPOINT_LAYERS_MAX - 1; i++) {
      qemuIo(run.activeLayerPath, `write -P ${i + 1} ${i * 65536} 65536`);
      await run.liveCheckpoint({ grown: true, switchLayer: switched });
    }
    qemuIo(run.activeLayerPath, "write -P 0xee 0 65536");
    await expect(run.liveCheckpoint({ grown: true, switchLayer: switched })).rejects.toMatchObject({
      code: "VM_CHECKPOINT_LIMIT",
    });
    const stop = await run.checkpoint({ grown: true });
    expect(stop.layers).toHaveLength(1);
    expect(hasPattern(topLayer(dir), 0, 65536, 0xee)).toBe(true);
    expect(hasPattern(topLayer(dir), 62 * 65536, 65536, 63)).toBe(true);
  }, 60_000);
});

test("the file QEMU writes is read from query-block, plain or as QEMU describes a layer attached over another", () => {
  expect(topFileOf("/d/layer-a.qcow2")).toBe("/d/layer-a.qcow2");
  const attached = {
    backing: { driver: "qcow2", file: { driver: "file", filename: "/d/layer-a.qcow2" } },
    driver: "qcow2",
    file: { driver: "file", filename: "/d/layer-b.qcow2" },
  };
  expect(topFileOf(`json:${JSON.stringify(attached)}`)).toBe("/d/layer-b.qcow2");
  expect(topFileOf("json:{")).toBeUndefined();
  expect(topFileOf(undefined)).toBeUndefined();
});

describe("an owner that died during a live checkpoint", () => {
  /**
   * A run that wrote 0xa1, then had its owner die at `point` of a live checkpoint, after which
   * QEMU (if it had switched) wrote 0xa2 into the new layer. Returns the new layer's name.
   */
  async function diesDuring(
    point: "named" | "created" | "switched" | "flipped",
  ): Promise<{ run: DiskRun; next: string }> {
    const run = await store.openRun(dir);
    guestWrites(run, 1, 0xa1);
    const pointer = pointerOf();
    const layer = path.basename(run.layerPath);
    const next = newLayerName();
    const openedAt = new Date().toISOString();
    await writeRunRecord(dir, {
      version: 1,
      layer,
      next: [next],
      generation: pointer.generation,
      openedAt,
      baseLength: 1,
    });
    if (point !== "named") {
      execFileSync("qemu-img", [
        "create",
        "-q",
        "-f",
        "qcow2",
        "-u",
        "-b",
        layer,
        "-F",
        "qcow2",
        path.join(dir, next),
        String(GiB),
      ]);
    }
    if (point === "switched" || point === "flipped") qemuIo(path.join(dir, next), `write -P 0xa2 ${2 * MiB} ${MiB}`);
    if (point === "flipped") {
      await writePointer(dir, { ...pointer, layers: [...pointer.layers, layer], generation: pointer.generation + 1 });
    }
    await ownerDies();
    return { run, next };
  }

  test.each([
    ["the new layer was named, not yet made", "named", false],
    ["the new layer was made, QEMU not yet switched", "created", false],
    ["QEMU switched, the pointer not yet flipped", "switched", true],
    ["the pointer flipped, the record not yet rewritten", "flipped", true],
  ] as const)("%s: the next open recovers everything written", async (_, point, wroteNext) => {
    const before = pointerOf();
    const { next } = await diesDuring(point);
    const opened = await store.openRun(dir);
    expect(opened.recovery?.outcome).toBe("recovered");
    expect([checkpointHas(1, 0xa1), checkpointHas(2, 0xa2)]).toEqual([true, wroteNext]);
    // Merged down to the chain the dead run opened on; no layer of it is left over or set aside.
    expect(pointerOf().layers).toEqual(before.layers);
    expect(fs.existsSync(path.join(dir, next))).toBe(false);
    expect(fs.existsSync(path.join(dir, SET_ASIDE_DIR))).toBe(false);
    expect(opened.pointer.generation).toBe(before.generation + (point === "flipped" ? 2 : 1));
    await opened.discard();
  });

  test("a new layer with a torn header was never written: it is removed, the run under it recovered", async () => {
    const { next } = await diesDuring("created");
    fs.writeFileSync(path.join(dir, next), Buffer.alloc(100));
    const opened = await store.openRun(dir);
    expect(opened.recovery?.outcome).toBe("recovered");
    expect(checkpointHas(1, 0xa1)).toBe(true);
    expect(fs.existsSync(path.join(dir, next))).toBe(false);
    expect(fs.existsSync(path.join(dir, SET_ASIDE_DIR))).toBe(false);
    await opened.discard();
  });

  test("a new layer damaged after QEMU wrote it is set aside; the layer under it is kept", async () => {
    const before = pointerOf();
    const { next } = await diesDuring("switched");
    corruptL1(path.join(dir, next));
    const opened = await store.openRun(dir);
    expect(opened.recovery).toMatchObject({
      outcome: "set-aside",
      reopened: { generation: before.generation + 1 },
      setAside: {
        path: path.join(dir, SET_ASIDE_DIR, next),
        reason: expect.stringMatching(/^qemu-img found it damaged/),
      },
    });
    expect([checkpointHas(1, 0xa1), checkpointHas(2, 0xa2)]).toEqual([true, false]);
    await opened.discard();
  });

  test("an unusable run layer is set aside with the new layer over it, and the last checkpoint reopens", async () => {
    const before = pointerOf();
    const { run, next } = await diesDuring("switched");
    corruptL1(run.layerPath);
    const opened = await store.openRun(dir);
    expect(opened.recovery).toMatchObject({ outcome: "set-aside", reopened: { generation: before.generation } });
    expect(pointerOf()).toEqual(before);
    const aside = (await store.inspect(dir)).setAside;
    expect(aside.map((layer) => layer.name).sort()).toEqual([path.basename(run.layerPath), next].sort());
    expect(aside.find((layer) => layer.name === next)?.reason).toContain("could not be used");
    await opened.discard();
  });

  test("a live checkpoint's layers are recovered after the owner died with several published", async () => {
    const before = pointerOf();
    const run = await store.openRun(dir);
    guestWrites(run, 1, 0xb1);
    await run.liveCheckpoint({ grown: true, switchLayer: switched });
    guestWrites(run, 2, 0xb2);
    await run.liveCheckpoint({ grown: true, switchLayer: switched });
    guestWrites(run, 3, 0xb3);
    await ownerDies();
    const opened = await store.openRun(dir);
    expect(opened.recovery?.outcome).toBe("recovered");
    expect([1, 2, 3].map((mib) => checkpointHas(mib, 0xb0 + mib))).toEqual([true, true, true]);
    expect(pointerOf().layers).toEqual(before.layers);
    await opened.discard();
  });
});
