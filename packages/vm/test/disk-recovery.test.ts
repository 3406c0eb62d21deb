// A run whose owner died before its checkpoint (controller killed, host power lost), with real
// qemu-img and qemu-io and no VM: the next open recovers its writes, or sets an unusable layer
// aside; stale run records of every crash ordering are just removed.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import {
  DiskStore,
  MEMORY_FILE,
  POINTER_FILE,
  QemuImg,
  RUN_RECORD_FILE,
  SET_ASIDE_DIR,
  SUSPEND_STATE_FILE,
  recoveryNotice,
  type DiskRun,
} from "../src/index.js";
import { defaultQemuImgRunner } from "../src/disk/qemu-img.js";
import { corruptL1, fakeImage, hasPattern, qemuIo, tempDir, topLayer } from "./support/helpers.js";

const MiB = 1024 ** 2;

let root: string;
let cleanup: () => Promise<void>;
let image: string;
let dir: string;
const store = new DiskStore();

beforeEach(async () => {
  ({ dir: root, cleanup } = await tempDir());
  image = await fakeImage(path.join(root, "image"));
  dir = path.join(root, "inst");
  await store.createDisk(dir, { image, diskGiB: 1 });
  // A first stop, so the disk has a checkpoint of its own to fall back on.
  const first = await store.openRun(dir);
  qemuIo(first.layerPath, `write -P 0x55 0 ${MiB}`);
  await first.checkpoint({ grown: true });
});
afterEach(async () => cleanup());

interface Pointer {
  layers: string[];
  generation: number;
  grown: boolean;
  updatedAt: string;
}

function pointerOf(): Pointer {
  return JSON.parse(fs.readFileSync(path.join(dir, POINTER_FILE), "utf8")) as Pointer;
}

function runRecord(): { layer: string; generation: number; openedAt: string } | undefined {
  const file = path.join(dir, RUN_RECORD_FILE);
  return fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, "utf8")) : undefined;
}

/** The owner dies (SIGKILL, OOM, power cut): nothing more happens, and its lock is stale. */
async function ownerDies(): Promise<void> {
  await fsp.rm(path.join(dir, "lock.json"));
}

/** A run that writes `pattern` over the first MiB, then its owner dies. */
async function interruptedRun(pattern = 0xab): Promise<DiskRun> {
  const run = await store.openRun(dir);
  qemuIo(run.layerPath, `write -P ${pattern} 0 ${MiB}`);
  await ownerDies();
  return run;
}

/** Unlinks the cluster holding guest offset `offset` from the layer's L2 table: a leaked cluster. */
function leakClusterAt(file: string, offset: number): void {
  const handle = fs.openSync(file, "r+");
  try {
    const header = Buffer.alloc(48);
    fs.readSync(handle, header, 0, 48, 0);
    const clusterBits = header.readUInt32BE(20);
    const l1Offset = Number(header.readBigUInt64BE(40));
    const l1 = Buffer.alloc(8);
    fs.readSync(handle, l1, 0, 8, l1Offset);
    const l2Offset = Number(l1.readBigUInt64BE(0) & 0x00fffffffffffe00n);
    fs.writeSync(handle, Buffer.alloc(8), 0, 8, l2Offset + (offset >> clusterBits) * 8);
  } finally {
    fs.closeSync(handle);
  }
}

function qemuImgCheckStatus(file: string): number {
  try {
    execFileSync("qemu-img", ["check", "-f", "qcow2", file], { stdio: "pipe" });
    return 0;
  } catch (error) {
    return (error as { status: number }).status;
  }
}

describe("an interrupted run", () => {
  test("a run whose owner died is the next start's checkpoint, with everything it wrote", async () => {
    const before = pointerOf();
    const dead = await interruptedRun(0xab);
    const lastWrite = fs.statSync(dead.layerPath).mtime.toISOString();

    const run = await store.openRun(dir);
    expect(run.recovery).toEqual({
      outcome: "recovered",
      lastWriteAt: lastWrite,
      reopened: { generation: before.generation + 1, at: pointerOf().updatedAt },
    });
    expect(run.pointer.generation).toBe(before.generation + 1);
    expect(pointerOf().generation).toBe(before.generation + 1);
    expect(hasPattern(topLayer(dir), 0, MiB, 0xab)).toBe(true);
    // The new run reads it through its own layer, and is recorded in the dead one's place.
    expect(hasPattern(run.layerPath, 0, MiB, 0xab)).toBe(true);
    expect(runRecord()).toMatchObject({ layer: path.basename(run.layerPath), generation: before.generation + 1 });
    // Merged like a stop's layer: the chain stays one exclusive layer.
    expect(pointerOf().layers).toHaveLength(1);
    await run.discard();
    expect(runRecord()).toBeUndefined();
    expect(hasPattern(topLayer(dir), 0, MiB, 0xab)).toBe(true);
    expect((await store.inspect(dir)).setAside).toEqual([]);
  });

  test("leaked clusters of a killed QEMU are repaired, not a reason to give up the run", async () => {
    const dead = await store.openRun(dir);
    qemuIo(dead.layerPath, `write -P 0xab 0 ${MiB}`);
    qemuIo(dead.layerPath, `write -P 0xcd ${4 * MiB} 64k`);
    leakClusterAt(dead.layerPath, 4 * MiB);
    expect(qemuImgCheckStatus(dead.layerPath)).toBe(3);
    await ownerDies();

    const run = await store.openRun(dir);
    expect(run.recovery?.outcome).toBe("recovered");
    expect(hasPattern(topLayer(dir), 0, MiB, 0xab)).toBe(true);
    for (const layer of pointerOf().layers) expect(qemuImgCheckStatus(path.join(dir, layer))).toBe(0);
    await run.discard();
  });

  test("a layer with corrupt metadata is set aside untouched, and the previous checkpoint is current", async () => {
    const before = pointerOf();
    const dead = await interruptedRun(0xab);
    corruptL1(dead.layerPath);
    const bytes = fs.readFileSync(dead.layerPath);
    const lastWrite = fs.statSync(dead.layerPath).mtime.toISOString();
    const layer = path.basename(dead.layerPath);

    const run = await store.openRun(dir);
    const aside = path.join(dir, SET_ASIDE_DIR, layer);
    expect(run.recovery).toMatchObject({
      outcome: "set-aside",
      lastWriteAt: lastWrite,
      reopened: { generation: before.generation, at: before.updatedAt },
      setAside: { path: aside, reason: expect.stringMatching(/^qemu-img found it damaged: ERROR .*L1 entry/) },
    });
    expect(run.recovery!.setAside!.bytes).toBeGreaterThan(0);
    expect(fs.readFileSync(aside).equals(bytes)).toBe(true);
    expect(fs.existsSync(dead.layerPath)).toBe(false);
    expect(pointerOf()).toEqual(before);
    expect(hasPattern(run.layerPath, 0, MiB, 0x55)).toBe(true);
    expect(runRecord()?.layer).toBe(path.basename(run.layerPath));
    const note = JSON.parse(fs.readFileSync(`${aside}.json`, "utf8"));
    expect(note).toMatchObject({ layer, lastWriteAt: lastWrite, generation: before.generation });
    expect(note.reason).toBe(run.recovery!.setAside!.reason);
    await run.checkpoint({ grown: true });

    // Listed by inspect, left alone by later opens, removed only when asked.
    const again = await store.openRun(dir);
    expect(again.recovery).toBeUndefined();
    await again.discard();
    const listed = (await store.inspect(dir)).setAside;
    expect(listed).toEqual([
      {
        name: layer,
        path: aside,
        bytes: run.recovery!.setAside!.bytes,
        at: note.at,
        lastWriteAt: lastWrite,
        reason: note.reason,
      },
    ]);
    await expect(store.removeSetAside(dir, "layer-0000000000000000.qcow2")).rejects.toMatchObject({
      code: "VM_DISK_NOT_FOUND",
    });
    await expect(store.removeSetAside(dir, `../${POINTER_FILE}`)).rejects.toMatchObject({ code: "VM_DISK_NOT_FOUND" });
    expect(fs.existsSync(path.join(dir, POINTER_FILE))).toBe(true);
    expect(await store.removeSetAside(dir, layer)).toEqual(listed);
    expect(fs.readdirSync(path.join(dir, SET_ASIDE_DIR))).toEqual([]);
    expect((await store.inspect(dir)).setAside).toEqual([]);
  });

  test("a layer of another size, format or backing is set aside with the reason", async () => {
    const dead = await interruptedRun();
    const backing = path.basename(topLayer(dir));
    await fsp.rm(dead.layerPath);
    execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", "-b", backing, "-F", "qcow2", dead.layerPath, "2G"]);
    const run = await store.openRun(dir);
    expect(run.recovery?.setAside?.reason).toBe(`its size is ${2 * 1024 ** 3} bytes, not the disk's ${1024 ** 3}`);
    await run.discard();

    const other = await interruptedRun();
    await fsp.rm(other.layerPath);
    execFileSync("qemu-img", ["create", "-q", "-f", "raw", other.layerPath, "1G"]);
    const third = await store.openRun(dir);
    expect(third.recovery?.setAside?.reason).toBe("it is not a qcow2 image (qemu-img reads it as raw)");
    await third.discard();

    const last = await interruptedRun();
    await fsp.rm(last.layerPath);
    const rootfs = path.join(image, "rootfs.ext4");
    execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", "-b", rootfs, "-F", "raw", last.layerPath, "1G"]);
    const fourth = await store.openRun(dir);
    expect(fourth.recovery?.setAside?.reason).toBe(
      `its backing file is ${rootfs}, not the checkpoint's top layer ${path.basename(topLayer(dir))}`,
    );
    await fourth.discard();
    expect((await store.inspect(dir)).setAside).toHaveLength(3);
    expect(await store.removeSetAside(dir)).toHaveLength(3);
    expect((await store.inspect(dir)).setAside).toEqual([]);
  });

  test("a destroy removes set-aside layers with the rest", async () => {
    const dead = await interruptedRun();
    corruptL1(dead.layerPath);
    const run = await store.openRun(dir);
    expect(run.recovery?.outcome).toBe("set-aside");
    await run.discard();
    await store.destroy(dir);
    expect(fs.existsSync(dir)).toBe(false);
  });

  test("a recovered run drops saved memory, which must never resume over that disk", async () => {
    const before = pointerOf();
    // A suspend that died after saving the memory, before its flip: the record names the generation
    // the recovery creates.
    await interruptedRun();
    fs.writeFileSync(path.join(dir, MEMORY_FILE), Buffer.alloc(MiB));
    fs.writeFileSync(
      path.join(dir, SUSPEND_STATE_FILE),
      JSON.stringify({ version: 1, generation: before.generation + 1 }),
    );
    const run = await store.openRun(dir);
    expect(run.recovery?.outcome).toBe("recovered");
    expect(fs.existsSync(path.join(dir, MEMORY_FILE))).toBe(false);
    expect(fs.existsSync(path.join(dir, SUSPEND_STATE_FILE))).toBe(false);
    expect((await store.inspect(dir)).memoryBytes).toBe(0);
    await run.discard();
  });

  test("a failure that says nothing about the layer (a busy disk) neither recovers nor sets it aside", async () => {
    const dead = await interruptedRun();
    const real = defaultQemuImgRunner();
    const busy = new DiskStore({
      qemuImg: new QemuImg((args, options) =>
        args[0] === "check"
          ? Promise.reject(
              Object.assign(new Error("exit 1"), { code: 1, stderr: 'qemu-img: Failed to get "write" lock' }),
            )
          : real(args, options),
      ),
    });
    await expect(busy.openRun(dir)).rejects.toMatchObject({ code: "VM_DISK_BUSY" });
    expect(fs.existsSync(dead.layerPath)).toBe(true);
    expect(runRecord()?.layer).toBe(path.basename(dead.layerPath));
    const run = await store.openRun(dir);
    expect(run.recovery?.outcome).toBe("recovered");
    await run.discard();
  });
});

describe("run records", () => {
  test("a run is recorded while it runs; a checkpoint and a discard leave no record", async () => {
    const before = pointerOf();
    const run = await store.openRun(dir);
    expect(runRecord()).toEqual({
      version: 1,
      layer: path.basename(run.layerPath),
      generation: before.generation,
      openedAt: expect.any(String),
      baseLength: before.layers.length,
    });
    await run.checkpoint({ grown: true });
    expect(runRecord()).toBeUndefined();
    const dropped = await store.openRun(dir);
    expect(runRecord()?.layer).toBe(path.basename(dropped.layerPath));
    await dropped.discard();
    expect(runRecord()).toBeUndefined();
    expect(fs.existsSync(dropped.layerPath)).toBe(false);
  });

  test("a crash after a checkpoint's flip leaves a record that the next open just removes", async () => {
    const run = await store.openRun(dir);
    qemuIo(run.layerPath, `write -P 0x66 0 ${MiB}`);
    // The flip happened, the record's removal did not.
    const pointer = pointerOf();
    const flipped = {
      ...pointer,
      layers: [...pointer.layers, path.basename(run.layerPath)],
      generation: pointer.generation + 1,
    };
    fs.writeFileSync(path.join(dir, POINTER_FILE), JSON.stringify(flipped));
    await ownerDies();
    const next = await store.openRun(dir);
    expect(next.recovery).toBeUndefined();
    expect(pointerOf()).toMatchObject({ generation: flipped.generation, layers: flipped.layers });
    expect(hasPattern(next.layerPath, 0, MiB, 0x66)).toBe(true);
    expect(runRecord()?.layer).toBe(path.basename(next.layerPath));
    await next.discard();
  });

  test("a crash during a discard leaves nothing to recover, whichever file went first", async () => {
    const before = pointerOf();
    // The layer went, the record stayed.
    const run = await store.openRun(dir);
    await fsp.rm(run.layerPath);
    await ownerDies();
    const next = await store.openRun(dir);
    expect(next.recovery).toBeUndefined();
    expect(pointerOf()).toEqual(before);
    // The record went, the layer stayed: an orphan, deleted.
    await fsp.rm(path.join(dir, RUN_RECORD_FILE));
    await ownerDies();
    const third = await store.openRun(dir);
    expect(third.recovery).toBeUndefined();
    expect(fs.existsSync(next.layerPath)).toBe(false);
    expect(pointerOf()).toEqual(before);
    await third.discard();
  });

  test("an unreadable record names nothing to recover and is removed", async () => {
    const before = pointerOf();
    const run = await store.openRun(dir);
    fs.writeFileSync(path.join(dir, RUN_RECORD_FILE), "{");
    await ownerDies();
    const next = await store.openRun(dir);
    expect(next.recovery).toBeUndefined();
    expect(fs.existsSync(run.layerPath)).toBe(false);
    expect(pointerOf()).toEqual(before);
    await next.discard();
  });
});

test("the notice says what became of the run, in the user's words", () => {
  const now = new Date(2025, 2, 1, 18, 0, 0);
  const at = new Date(2025, 2, 1, 14, 3, 12).toISOString();
  expect(recoveryNotice({ outcome: "recovered", lastWriteAt: at, reopened: { generation: 4, at } }, now)).toBe(
    "recovered the disk as of 14:03:12 (its controller stopped without a checkpoint); the guest's journal replays it",
  );
  const earlier = new Date(2025, 1, 28, 9, 5, 0).toISOString();
  expect(
    recoveryNotice(
      {
        outcome: "set-aside",
        lastWriteAt: at,
        reopened: { generation: 3, at: earlier },
        setAside: {
          path: "/d/set-aside/layer-1.qcow2",
          bytes: 3 * MiB + 1,
          reason: "qemu-img found it damaged: ERROR x",
        },
      },
      now,
    ),
  ).toBe(
    "could not use the interrupted run (qemu-img found it damaged: ERROR x); reopened the checkpoint of 2025-02-28 09:05:00; set aside: /d/set-aside/layer-1.qcow2 (4 MiB)",
  );
});
