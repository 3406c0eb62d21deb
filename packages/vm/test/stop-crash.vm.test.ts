// Fault injection: SIGKILL the process that owns a VM at random moments of its stop. After every
// kill, no QEMU may survive, every layer must pass `qemu-img check`, and the next boot must find
// exactly the pre-stop or the post-stop state — never a mix, never an unbootable disk; a kill
// before the pointer flip is recovered from the run's layer by the next boot, never set aside.
// Each trial costs one boot (~10-30 s under TCG): PI_SANDBOX_FAULT_TRIALS sets how many (default
// 20, the acceptance number; about 3.5 min on an idle 2-core TCG host). The same for a suspend,
// PI_SANDBOX_SUSPEND_FAULT_TRIALS times (default 3): a boot that resumes saved memory must find
// the post-suspend generation (the memory belongs to the checkpoint taken with it). And a live
// checkpoint: a SIGKILL after it keeps everything (the run is recovered over the checkpoint), and
// with the run's layer then made unusable, still what the checkpoint held.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import { DiskStore, RUN_RECORD_FILE, SET_ASIDE_DIR } from "../src/index.js";
import { TS_NODE_ARGS, corruptL1, tempDir } from "./support/helpers.js";
import { qemuProcessesUsing, testImage } from "./support/vm-support.js";

const TRIALS = Number(process.env.PI_SANDBOX_FAULT_TRIALS ?? 20);
const SUSPEND_TRIALS = Number(process.env.PI_SANDBOX_SUSPEND_FAULT_TRIALS ?? 3);
const CHILD = path.resolve("test/support/stop-child.ts");
/**
 * Node's compile cache for the helper's TypeScript, shared by its 30-odd runs: the first one
 * transforms the vm sources, the others load them from here (under TCG's load the transform took
 * 1-3 s of each run, as long as its boot's first second).
 */
let compileCache: { dir: string; cleanup: () => Promise<void> };

beforeAll(async () => {
  compileCache = await tempDir("pisb-stop-child-cache-");
});

afterAll(async () => {
  await compileCache?.cleanup();
});

interface ChildEvent {
  event: "booted" | "stopping" | "stopped" | "checkpointed" | "written";
  marker?: string;
  /** What /srv/live-1 and /srv/live-2 hold, space-separated (`live:` mode). */
  live?: string;
  /** A live checkpoint's result fields. */
  changed?: boolean;
  stallMs?: number;
  generation?: number;
  blob?: string;
  qemuPid?: number;
  totalMs?: number;
  warm?: boolean;
  /** `RunningVm.recovery.outcome` of the boot, null without one. */
  recovery?: string | null;
}

/** Runs the helper; `onEvent` sees each JSON line; resolves when it exits. */
function runChild(
  diskDir: string,
  stateRoot: string,
  mode: string,
  onEvent: (e: ChildEvent, c: ChildProcess) => void,
  how: "stop" | "suspend" = "stop",
) {
  const child = spawn(process.execPath, [...TS_NODE_ARGS, CHILD, diskDir, stateRoot, mode, how], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, NODE_COMPILE_CACHE: compileCache.dir },
  });
  let stderr = "";
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  createInterface({ input: child.stdout! }).on("line", (line) => {
    if (line.startsWith("{")) onEvent(JSON.parse(line) as ChildEvent, child);
  });
  return new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal, stderr })),
  );
}

function isQemu(pid: number): boolean {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("qemu-system");
  } catch {
    return false;
  }
}

function checkLayers(diskDir: string): void {
  const pointer = JSON.parse(fs.readFileSync(path.join(diskDir, "disk.json"), "utf8")) as { layers: string[] };
  for (const layer of pointer.layers) {
    try {
      execFileSync("qemu-img", ["check", "-q", "-U", "-f", "qcow2", path.join(diskDir, layer)], { stdio: "pipe" });
    } catch (error) {
      // Exit 3 = leaked clusters only: harmless space, not corruption.
      if ((error as { status?: number }).status !== 3) throw error;
    }
  }
}

test(`SIGKILL at ${TRIALS} random moments of a stop leaves one complete checkpoint each time`, () =>
  faultTrials("stop", TRIALS));

test(`SIGKILL at ${SUSPEND_TRIALS} random moments of a suspend leaves one complete checkpoint, resumed only with its own memory`, () =>
  faultTrials("suspend", SUSPEND_TRIALS));

test("a live checkpoint outlives its owner's SIGKILL, and bounds the loss when the run's layer is unusable", async () => {
  const { dir, cleanup } = await tempDir("pisb-vmlive-");
  try {
    const diskDir = path.join(dir, "disk");
    const stateRoot = path.join(dir, "state");
    await new DiskStore({ stateRoot }).createDisk(diskDir, { image: testImage(), diskGiB: 2 });
    /** Boots `live:<tag>`, SIGKILLs it once its second file is synced; returns its checkpoint. */
    const killedAfterCheckpoint = async (tag: string) => {
      let checkpoint: ChildEvent | undefined;
      let written = false;
      const exit = await runChild(diskDir, stateRoot, `live:${tag}`, (e, child) => {
        if (e.event === "checkpointed") checkpoint = e;
        if (e.event === "written") {
          written = true;
          child.kill("SIGKILL");
        }
      });
      if (!written) throw new Error(`live:${tag} never wrote its second file:\n${exit.stderr.slice(-3000)}`);
      for (let i = 0; i < 50 && qemuProcessesUsing(diskDir).length > 0; i += 1) {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(qemuProcessesUsing(diskDir)).toEqual([]);
      return checkpoint!;
    };
    const reopen = async () => {
      let booted: ChildEvent | undefined;
      const exit = await runChild(diskDir, stateRoot, "check", (e) => {
        if (e.event === "booted") booted = e;
      });
      expect(exit).toMatchObject({ code: 0 });
      return booted!;
    };

    // The checkpoint published the first file; the run on top of it, recovered, has the second.
    const first = await killedAfterCheckpoint("a");
    expect(first).toMatchObject({ changed: true, generation: 1 });
    expect(first.stallMs).toBeLessThan(1000);
    checkLayers(diskDir);
    expect(await reopen()).toMatchObject({ live: "a1 a2", recovery: "recovered" });

    // The same, but the layer QEMU wrote after the checkpoint is unusable: only the second file goes.
    const second = await killedAfterCheckpoint("b");
    expect(second.changed).toBe(true);
    const record = JSON.parse(fs.readFileSync(path.join(diskDir, RUN_RECORD_FILE), "utf8")) as { layer: string };
    corruptL1(path.join(diskDir, record.layer));
    expect(await reopen()).toMatchObject({ live: "b1", recovery: "set-aside" });
    checkLayers(diskDir);
    console.log(`live checkpoint stalls: ${Math.round(first.stallMs!)} ms, ${Math.round(second.stallMs!)} ms`);
  } finally {
    await cleanup();
  }
});

async function faultTrials(how: "stop" | "suspend", trials: number): Promise<void> {
  const { dir, cleanup } = await tempDir("pisb-vmfault-");
  try {
    const diskDir = path.join(dir, "disk");
    const stateRoot = path.join(dir, "state");
    await new DiskStore({ stateRoot }).createDisk(diskDir, { image: testImage(), diskGiB: 2 });

    // Generation 0: an uninterrupted stop, which also measures how long a stop takes.
    let stopMs = 0;
    const calibration = await runChild(
      diskDir,
      stateRoot,
      "0",
      (e) => {
        if (e.event === "stopped") stopMs = e.totalMs ?? 0;
      },
      how,
    );
    if (calibration.code !== 0) throw new Error(`calibration run failed:\n${calibration.stderr.slice(-3000)}`);
    const windowMs = Math.max(600, stopMs * 1.2);

    let expected = new Set(["0"]);
    let lastStopped = true;
    const outcomes: string[] = [];
    for (let trial = 1; trial <= trials; trial += 1) {
      const delayMs = Math.round(Math.random() * windowMs);
      let booted: ChildEvent | undefined;
      let stopped = false;
      const exit = await runChild(
        diskDir,
        stateRoot,
        String(trial),
        (e, child) => {
          if (e.event === "booted") booted = e;
          if (e.event === "stopping") setTimeout(() => child.kill("SIGKILL"), delayMs);
          if (e.event === "stopped") stopped = true;
        },
        how,
      );
      if (!booted) {
        throw new Error(
          `trial ${trial}: the helper never booted (exit ${exit.code ?? exit.signal}); trials so far: ${outcomes.join(" ")}\n${exit.stderr.slice(-3000)}`,
        );
      }
      // The boot found exactly one of the two generations the previous trial could leave.
      expect(expected.has(booted!.marker!)).toBe(true);
      expect(booted!.blob).toBe(booted!.marker === "none" ? "blob-none" : "blob-ok");
      // Saved memory is resumed only with the checkpoint taken with it: the newest one.
      if (booted!.warm) expect(booted!.marker).toBe(String(trial - 1));
      // Only a killed stop leaves a run to recover, and a SIGKILL never makes its layer unusable.
      if (booted!.recovery !== null) {
        expect(booted!.recovery).toBe("recovered");
        expect(lastStopped).toBe(false);
        expect(booted!.warm).toBe(false);
      }
      outcomes.push(
        `${delayMs}ms:${stopped ? "after" : "during"}:${booted!.marker}${booted!.warm ? ":warm" : ""}${booted!.recovery ? ":recovered" : ""}`,
      );
      if (!stopped) expect(exit.signal).toBe("SIGKILL");

      // QEMU died with its owner (parent-death signal), and every layer is sound.
      const qemuPid = booted!.qemuPid!;
      for (let i = 0; i < 50 && qemuProcessesUsing(diskDir).length > 0; i += 1) {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(qemuProcessesUsing(diskDir)).toEqual([]);
      expect(isQemu(qemuPid)).toBe(false);
      checkLayers(diskDir);
      expected = stopped ? new Set([String(trial)]) : new Set([booted!.marker!, String(trial)]);
      lastStopped = stopped;
    }

    // The last kill must also leave a bootable disk with one of its two generations.
    let final: ChildEvent | undefined;
    const check = await runChild(diskDir, stateRoot, "check", (e) => {
      if (e.event === "booted") final = e;
    });
    expect(check).toMatchObject({ code: 0 });
    expect(expected.has(final!.marker!)).toBe(true);
    expect(final!.blob).toBe("blob-ok");
    if (final!.recovery !== null) expect([final!.recovery, lastStopped]).toEqual(["recovered", false]);
    expect(fs.existsSync(path.join(diskDir, SET_ASIDE_DIR))).toBe(false);
    console.log(`${how} fault trials (window ${Math.round(windowMs)} ms): ${outcomes.join(" ")}`);
  } finally {
    await cleanup();
  }
}
