// Crashes while keeping, rewinding to and removing kept checkpoints, with real qemu-img and qemu-io
// standing in for QEMU's writes and no VM. Each crash stops the operation for good at one of its
// steps (a file-system call that never returns, as after a SIGKILL: no cleanup runs) or rebuilds
// the on-disk state just before its commit point; the owner's lock is then left to a dead owner.
// The next open, keep and list must find a consistent disk: the pointer names layers that exist,
// the data reads as the state before or after the operation, no temp directory or orphan layer is
// left once it opened, and every kept checkpoint listed is whole.
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import {
  DiskStore,
  MEMORY_FILE,
  POINTER_FILE,
  RUN_RECORD_FILE,
  SUSPEND_STATE_FILE,
  type DiskPointer,
  type DiskRun,
} from "../src/index.js";
import {
  CHECKPOINTS_DIR,
  keepCheckpoint,
  keptDir,
  listKept,
  removeKept,
  rewindTo,
  type KeptCheckpoint,
} from "../src/disk/kept-checkpoints.js";
import { checkSuspendState, type SavedMachine } from "../src/disk/vm-memory.js";
import { LAYER_PATTERN } from "../src/filenames.js";
import { fakeImage, hasPattern, qemuIo, tempDir, topLayer } from "./support/helpers.js";

const MiB = 1024 ** 2;
const MEMORY = "memory bytes";
const MACHINE: SavedMachine = {
  qemu: "QEMU emulator version 7.2.22",
  accel: "tcg",
  machineType: "q35",
  cpu: "max",
  memory: "2048M",
  cpus: 1,
  image: "kernel|initrd|rootfs",
  gondolin: "0.12.0",
};

let root: string;
let cleanup: () => Promise<void>;
let dir: string;
const store = new DiskStore();
const switched = async () => undefined;

beforeEach(async () => {
  ({ dir: root, cleanup } = await tempDir("pisb-kcrash-"));
  dir = path.join(root, "inst");
  await store.createDisk(dir, { image: await fakeImage(path.join(root, "image")), diskGiB: 1 });
  await stopAfterWriting(0, 0x11);
});
afterEach(async () => cleanup());

function pointerOf(): DiskPointer {
  return JSON.parse(fs.readFileSync(path.join(dir, POINTER_FILE), "utf8")) as DiskPointer;
}

/** One boot writing `pattern` over MiB number `mib`, then a stop. */
async function stopAfterWriting(mib: number, pattern: number): Promise<void> {
  const run = await store.openRun(dir);
  qemuIo(run.layerPath, `write -P ${pattern} ${mib * MiB} ${MiB}`);
  await run.checkpoint({ grown: true });
}

/** Whether the disk's current checkpoint reads `pattern` at MiB number `mib`. */
const reads = (mib: number, pattern: number) => hasPattern(topLayer(dir), mib * MiB, MiB, pattern);

/** A suspend's saved memory for the disk's current checkpoint, as a suspend leaves it. */
async function saveFakeMemory(): Promise<void> {
  await fsp.writeFile(path.join(dir, MEMORY_FILE), MEMORY);
  await fsp.writeFile(
    path.join(dir, SUSPEND_STATE_FILE),
    JSON.stringify({
      version: 1,
      generation: pointerOf().generation,
      bytes: MEMORY.length,
      savedAt: new Date().toISOString(),
      machine: MACHINE,
    }),
  );
}

/** Whether a boot of the disk's current checkpoint would resume the saved memory. */
async function memoryResumable(): Promise<boolean> {
  return (await checkSuspendState(dir, pointerOf().generation, MACHINE))?.usable === true;
}

type FsMethod = "mkdir" | "link" | "rename" | "rm";

/**
 * Runs `work` until its `nth` call of `fsp[method]` whose paths `where` accepts, and stops it
 * there for good: that call never returns, and nothing after it (no catch, no cleanup) runs, as
 * when the process is killed. Then the owner is dead: its disk lock, if it took one, is stale.
 */
async function crashAt(
  method: FsMethod,
  where: (first: string, second: string) => boolean,
  work: () => Promise<unknown>,
  nth = 1,
): Promise<void> {
  const methods = fsp as unknown as Record<FsMethod, (...args: unknown[]) => Promise<unknown>>;
  const real = methods[method];
  let seen = 0;
  let reached = () => {};
  const crashed = new Promise<"crashed">((resolve) => (reached = () => resolve("crashed")));
  methods[method] = (...args: unknown[]) => {
    if (where(String(args[0]), String(args[1])) && ++seen === nth) {
      reached();
      return new Promise(() => {});
    }
    return real.apply(fsp, args);
  };
  try {
    const outcome = await Promise.race([
      crashed,
      work().then(
        () => "finished",
        (error: unknown) => `failed: ${String(error)}`,
      ),
    ]);
    if (outcome !== "crashed") throw new Error(`the crash point was never reached (the work ${outcome})`);
  } finally {
    methods[method] = real;
  }
  await fsp.rm(path.join(dir, "lock.json"), { force: true });
}

const under = (parent: string) => (p: string) => path.dirname(p) === parent;
const named = (name: string) => (p: string) => path.basename(p) === name;
const isTemp = (p: string) => path.basename(p).startsWith(".tmp-");

/**
 * Checks what the brief of this file promises once the disk was opened again (`run`, if open):
 * the pointer's layers exist, the directory holds no layer beyond them and the run's, no temp
 * file or directory, and every kept checkpoint is whole: its record, pointer and layers (and
 * memory, for a memory one) are there, and its pointer names its layers.
 */
async function expectConsistent(run?: DiskRun): Promise<void> {
  const pointer = pointerOf();
  const top = await fsp.readdir(dir);
  for (const layer of pointer.layers) expect(top).toContain(layer);
  const runLayers = run ? [path.basename(run.layerPath), path.basename(run.activeLayerPath)] : [];
  expect(top.filter((f) => LAYER_PATTERN.test(f) && !pointer.layers.includes(f) && !runLayers.includes(f))).toEqual([]);
  expect(top.filter((f) => f.startsWith(".tmp-"))).toEqual([]);
  const entries = await fsp.readdir(path.join(dir, CHECKPOINTS_DIR)).catch(() => [] as string[]);
  expect(entries.filter((f) => f.startsWith(".tmp-"))).toEqual([]);
  const listed = await listKept(dir);
  expect(listed.map((k) => k.id).sort()).toEqual([...entries].sort());
  for (const kept of listed) {
    const files = await fsp.readdir(keptDir(dir, kept.id));
    for (const layer of kept.layers) expect(files).toContain(layer);
    if (kept.memory) expect(files).toContain(MEMORY_FILE);
    const own = JSON.parse(await fsp.readFile(path.join(keptDir(dir, kept.id), POINTER_FILE), "utf8")) as DiskPointer;
    expect(own.layers).toEqual(kept.layers);
  }
}

/** Each layer of the current chain that no whole kept checkpoint holds has one link: merges may write it. */
async function expectOwnLayersUnshared(): Promise<void> {
  const held = new Set((await listKept(dir)).flatMap((k) => k.layers));
  for (const layer of pointerOf().layers.filter((l) => !held.has(l))) {
    expect({ layer, links: fs.statSync(path.join(dir, layer)).nlink }).toEqual({ layer, links: 1 });
  }
}

describe("a keep killed at each of its steps leaves no checkpoint, and nothing the next open keeps", () => {
  let base: KeptCheckpoint;

  beforeEach(async () => {
    // A kept checkpoint under the current chain: the chain keeps two layers from here on.
    base = await store.keepCheckpoint(dir, { label: "base" });
    await stopAfterWriting(1, 0x22);
    await saveFakeMemory();
    expect(pointerOf().layers).toHaveLength(2);
  });

  const keptRoot = () => path.join(dir, CHECKPOINTS_DIR);
  const keep = () => store.keepCheckpoint(dir, { label: "next", memory: true });
  const steps: [string, FsMethod, (a: string, b: string) => boolean, number][] = [
    ["before its temp directory", "mkdir", (p) => isTemp(p), 1],
    ["after its temp directory, before the first link", "link", (_, to) => isTemp(path.dirname(to)), 1],
    ["between two layer links", "link", (_, to) => isTemp(path.dirname(to)), 2],
    ["after the layers, at the memory link", "link", (_, to) => isTemp(path.dirname(to)) && named(MEMORY_FILE)(to), 1],
    ["before the rename into place", "rename", (from) => under(keptRoot())(from) && isTemp(from), 1],
  ];

  test.each(steps)("%s", async (_step, method, where, nth) => {
    const before = pointerOf();
    await crashAt(method, where, keep, nth);
    // Nothing half made is listed, and the disk is as it was.
    expect((await listKept(dir)).map((k) => k.id)).toEqual([base.id]);
    expect(pointerOf()).toEqual(before);
    expect(await memoryResumable()).toBe(true);

    const run = await store.openRun(dir);
    await expectConsistent(run);
    qemuIo(run.layerPath, `write -P 0x33 ${2 * MiB} ${MiB}`);
    await run.checkpoint({ grown: true });
    expect(reads(0, 0x11) && reads(1, 0x22) && reads(2, 0x33)).toBe(true);
    // No link left by the dead keep holds a layer back from the stop's merge.
    await expectOwnLayersUnshared();
    expect(pointerOf().layers).toHaveLength(2);

    const again = await store.keepCheckpoint(dir, { label: "again" });
    expect((await listKept(dir)).map((k) => k.label)).toEqual(["base", "again"]);
    await expectConsistent();
    await store.rewind(dir, base.id);
    expect(reads(0, 0x11) && !reads(1, 0x22)).toBe(true);
    await store.rewind(dir, again.id);
    expect(reads(2, 0x33)).toBe(true);
  });

  test("after the rename, before the directory is synced: the checkpoint is whole and listed", async () => {
    // The rename is the commit point: rebuilt here as a finished keep.
    const kept = await keep();
    expect((await listKept(dir)).map((k) => k.id)).toEqual([base.id, kept.id]);
    const run = await store.openRun(dir);
    await expectConsistent(run);
    await run.discard();
    await store.rewind(dir, kept.id);
    expect(reads(1, 0x22)).toBe(true);
    expect(await memoryResumable()).toBe(true);
  });

  test("a keep of a running disk killed mid-link: the next open recovers the run and drops the keep's links", async () => {
    const run = await store.openRun(dir);
    qemuIo(run.activeLayerPath, `write -P 0x44 ${3 * MiB} ${MiB}`);
    await run.liveCheckpoint({ grown: true, switchLayer: switched });
    qemuIo(run.activeLayerPath, `write -P 0x45 ${4 * MiB} ${MiB}`);
    // As RunningVm.checkpoint({keep}) does between live checkpoints; its owner then dies.
    await crashAt(
      "link",
      (_, to) => isTemp(path.dirname(to)),
      () => keepCheckpoint(run.dir, run.pointer, {}),
      3,
    );
    expect(fs.existsSync(path.join(dir, RUN_RECORD_FILE))).toBe(true);

    const next = await store.openRun(dir);
    expect(next.recovery?.outcome).toBe("recovered");
    await expectConsistent(next);
    await next.checkpoint({ grown: true });
    expect(reads(3, 0x44) && reads(4, 0x45)).toBe(true);
    await expectOwnLayersUnshared();
  });
});

describe("a rewind killed at each of its steps leaves the disk before or after it, and the checkpoint whole", () => {
  let older: KeptCheckpoint;
  let middle: KeptCheckpoint;
  let target: KeptCheckpoint;

  beforeEach(async () => {
    // older = [L0]; middle = [L0, L1]; target = [L0, L1, L2] with memory; then the disk goes back
    // to older and on: L1 and L2 are held by the kept checkpoints alone, and a rewind to target
    // links both back.
    older = await store.keepCheckpoint(dir, { label: "older" });
    await stopAfterWriting(1, 0x22);
    middle = await store.keepCheckpoint(dir, { label: "middle" });
    await stopAfterWriting(2, 0x33);
    await saveFakeMemory();
    target = await store.keepCheckpoint(dir, { label: "target", memory: true });
    await store.rewind(dir, older.id);
    await stopAfterWriting(3, 0x44);
    expect(target.layers.filter((l) => fs.existsSync(path.join(dir, l)))).toHaveLength(1);
  });

  /** The disk reads as it was before the rewind: older's data and the later write. */
  const readsBefore = () => reads(0, 0x11) && !reads(1, 0x22) && !reads(2, 0x33) && reads(3, 0x44);
  /** The disk reads as the target checkpoint. */
  const readsTarget = () => reads(1, 0x22) && reads(2, 0x33) && !reads(3, 0x44);
  const rewind = () => store.rewind(dir, target.id);

  /** What every case checks after its crash: a consistent disk that opens, runs and rewinds again. */
  async function expectRecoverable(state: "before" | "after"): Promise<void> {
    expect(state === "before" ? readsBefore() : readsTarget()).toBe(true);
    // Memory is resumed only over the disk it was saved with.
    expect(await memoryResumable()).toBe(state === "after");
    expect((await listKept(dir)).map((k) => k.label)).toEqual(["older", "middle", "target"]);
    const run = await store.openRun(dir);
    await expectConsistent(run);
    await run.discard();
    await expectConsistent();
    await rewind();
    expect(readsTarget()).toBe(true);
    expect(await memoryResumable()).toBe(true);
    await store.rewind(dir, middle.id);
    expect(reads(1, 0x22) && !reads(2, 0x33)).toBe(true);
    await expectConsistent();
  }

  test("after the run record was removed: the interrupted run is dropped, the disk is as before", async () => {
    const run = await store.openRun(dir);
    qemuIo(run.layerPath, `write -P 0x55 ${5 * MiB} ${MiB}`);
    // Its owner died without a stop; the rewind drops what it wrote.
    await fsp.rm(path.join(dir, "lock.json"));
    await crashAt("rm", named(SUSPEND_STATE_FILE), rewind);
    expect(fs.existsSync(path.join(dir, RUN_RECORD_FILE))).toBe(false);
    expect(pointerOf().layers).toHaveLength(2);
    await expectRecoverable("before");
    expect(reads(5, 0x55)).toBe(false);
  });

  test("between linking the checkpoint's two layers back", async () => {
    await crashAt("link", (_, to) => under(dir)(to) && LAYER_PATTERN.test(path.basename(to)), rewind, 2);
    await expectRecoverable("before");
  });

  test("after linking its layers, at the memory link", async () => {
    await crashAt("link", (_, to) => to === path.join(dir, MEMORY_FILE), rewind);
    await expectRecoverable("before");
  });

  /** Stops the rewind where its memory's pending record would become current, right after the pointer flip. */
  const rewindUpToSettle = () =>
    crashAt(
      "rename",
      (from) => path.basename(from) === `${SUSPEND_STATE_FILE}.pending`,
      () => rewindTo(dir, target.id),
    );

  test("after the memory link, before the pointer flip", async () => {
    // Rebuilt: the rewind up to its flip, then the pointer as it was (its rename is the commit point).
    const before = await fsp.readFile(path.join(dir, POINTER_FILE));
    await rewindUpToSettle();
    await fsp.writeFile(path.join(dir, POINTER_FILE), before);
    // No record names the generation the flip would have made: once the disk's own checkpoints
    // reach that number, no memory saved over another disk is there to resume.
    const next = pointerOf().generation + 1;
    expect((await checkSuspendState(dir, next, MACHINE))?.usable).not.toBe(true);
    await expectRecoverable("before");
  });

  test("after the pointer flip, before its memory's record became current: the next open makes it current", async () => {
    await rewindUpToSettle();
    await (await store.openRun(dir)).discard();
    await expectRecoverable("after");
  });

  test("after the pointer flip, before the abandoned layers were removed", async () => {
    await rewindTo(dir, target.id);
    expect((await fsp.readdir(dir)).filter((f) => LAYER_PATTERN.test(f))).toHaveLength(4);
    await expectRecoverable("after");
  });
});

describe("a removal killed at each of its steps never leaves half a checkpoint", () => {
  let kept: KeptCheckpoint;

  beforeEach(async () => {
    kept = await store.keepCheckpoint(dir, { label: "gone" });
    await stopAfterWriting(1, 0x22);
  });

  test("after the rename out of the way, before the delete", async () => {
    await crashAt(
      "rm",
      (p) => isTemp(p),
      () => removeKept(dir, kept.id),
    );
    expect(await listKept(dir)).toEqual([]);
    const run = await store.openRun(dir);
    await expectConsistent(run);
    await run.checkpoint({ grown: true });
    expect(reads(0, 0x11) && reads(1, 0x22)).toBe(true);
    // Nothing holds the layer it kept back from a merge any more.
    await expectOwnLayersUnshared();
  });

  test("halfway through the delete", async () => {
    // Rebuilt: renamed aside, its record and pointer already deleted, its layer link not yet.
    const aside = path.join(dir, CHECKPOINTS_DIR, `.tmp-rm-${kept.id}`);
    await fsp.rename(keptDir(dir, kept.id), aside);
    await fsp.rm(path.join(aside, "checkpoint.json"));
    await fsp.rm(path.join(aside, POINTER_FILE));
    expect(await listKept(dir)).toEqual([]);
    await expect(store.rewind(dir, kept.id)).rejects.toMatchObject({ code: "VM_CHECKPOINT_NOT_FOUND" });
    const run = await store.openRun(dir);
    await expectConsistent(run);
    await run.checkpoint({ grown: true });
    expect(reads(0, 0x11) && reads(1, 0x22)).toBe(true);
    await expectOwnLayersUnshared();
  });
});
