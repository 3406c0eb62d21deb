// The guest's memory saved while it runs, for a memory checkpoint (or a fork) that does not stop
// QEMU: a pre-copy migration into a file with QEMU's `pause-before-switchover`. The guest runs
// while its RAM is copied; QEMU pauses it for the last dirty pages and waits in `pre-switchover`
// with the disk still its own, where the caller switches the disk to a new layer (so the layer
// below matches the memory exactly); then QEMU writes the rest and the device state, and `cont`
// lets the guest run on (after a completed migration QEMU has given up its disk images; `cont`
// takes them back). A suspend (vm-memory.ts `saveMemory`) instead pauses first and lets QEMU exit.
import fsp from "node:fs/promises";
import path from "node:path";
import { VmError, messageOf } from "../errors.js";
import { memoryTempName } from "../filenames.js";
import type { QmpMonitor } from "../host/qmp.js";
import { LayerSwitchRefused, type DiskRun, type LiveDiskCheckpoint } from "./disk-layout.js";
import { keepCheckpoint, type KeepOptions, type KeptCheckpoint } from "./kept-checkpoints.js";
import {
  migrationSink,
  removeSuspendState,
  waitForMigration,
  writeSuspendState,
  type MigrationSink,
  type SuspendState,
} from "./vm-memory.js";

const PAUSE_BEFORE_SWITCHOVER = "pause-before-switchover";
/**
 * QEMU slows the guest's vCPU down while it dirties memory faster than the copy goes (20, 50, 80,
 * then 99 % of its time taken, a step each time two passes over the dirty pages in a row find it
 * still too fast), until the rest fits in the downtime limit: without it, a guest rewriting a
 * large buffer in a loop never let the copy end and the save failed at its deadline.
 */
const AUTO_CONVERGE = "auto-converge";
const THROTTLE = { "cpu-throttle-initial": 20, "cpu-throttle-increment": 30, "max-cpu-throttle": 99 } as const;
/**
 * How long QEMU may hold the guest paused for the last pages and the device state: QEMU's default
 * (300 ms) at first, longer each time the copy has not converged by then (a host too busy to copy
 * as fast as even the slowed guest dirties), and in the end as long as copying what is left takes,
 * as a suspend would: a save that ends with a longer pause rather than failing at its deadline.
 */
const DOWNTIME_STEPS = [
  { afterMs: 0, limitMs: 300 },
  { afterMs: 10_000, limitMs: 1_000 },
  { afterMs: 20_000, limitMs: 5_000 },
  { afterMs: 30_000, limitMs: 600_000 },
] as const;
/** Run states in which the guest does not run after a migration ended or failed. */
const NOT_RUNNING = new Set(["paused", "postmigrate", "finish-migrate"]);

/** A memory save under way (see {@link startLiveMemorySave}). */
export interface LiveMemorySave {
  /** Waits until QEMU has paused the guest before the switchover; its disk is still QEMU's. */
  paused(): Promise<void>;
  /** Lets QEMU write the rest (call once paused); {@link finish} waits for it. */
  proceed(): Promise<void>;
  /** Waits for the end of the save, lets the guest run, and returns what was written and for how long it was paused. */
  finish(): Promise<{ bytes: number; ms: number; pausedMs: number }>;
  /** Ends a save that is not to be finished: cancelled, the file removed, the guest running. */
  abandon(): Promise<void>;
}

/**
 * Starts saving the running guest's memory and device state into new file `file`. Throws when
 * QEMU refuses to start; from then on the caller either finishes or abandons the save.
 */
export async function startLiveMemorySave(
  monitor: QmpMonitor,
  runtimeDir: string,
  file: string,
  timeoutMs: number,
): Promise<LiveMemorySave> {
  const started = performance.now();
  const deadline = started + timeoutMs;
  let sink: MigrationSink | undefined;
  let pausedAt: number | undefined;
  const capabilities = (state: boolean) =>
    monitor.command("migrate-set-capabilities", {
      capabilities: [PAUSE_BEFORE_SWITCHOVER, AUTO_CONVERGE].map((capability) => ({ capability, state })),
    });
  const cleanUp = async () => {
    sink?.close();
    // Later suspends pause before they migrate: no stop before the switchover, nothing to slow
    // down, and QEMU's own downtime limit (a larger one copies all of a paused guest in one go).
    await capabilities(false).catch(() => undefined);
    await monitor
      .command("migrate-set-parameters", { "downtime-limit": DOWNTIME_STEPS[0].limitMs })
      .catch(() => undefined);
  };
  try {
    sink = await migrationSink(runtimeDir, file);
    await capabilities(true);
    // QEMU limits migration to 128 MiB/s by default; a local file has no reason for a limit.
    await monitor.command("migrate-set-parameters", {
      "max-bandwidth": 64 * 1024 ** 3,
      "downtime-limit": DOWNTIME_STEPS[0].limitMs,
      ...THROTTLE,
    });
    await monitor.command("migrate", { uri: sink.uri });
  } catch (error) {
    await cleanUp();
    await fsp.rm(file, { force: true }).catch(() => undefined);
    throw new Error(`QEMU could not start saving the guest's memory: ${messageOf(error)}`, { cause: error });
  }
  const running = async () => {
    const status = (await monitor.command("query-status")) as { status?: unknown };
    if (NOT_RUNNING.has(String(status.status))) await monitor.command("cont");
  };
  return {
    async paused() {
      await waitForSwitchover(monitor, started, deadline);
      pausedAt = performance.now();
    },
    async proceed() {
      await monitor.command("migrate-continue", { state: "pre-switchover" });
    },
    async finish() {
      try {
        await waitForMigration(monitor, deadline);
        await monitor.command("cont");
        const pausedMs = performance.now() - (pausedAt ?? performance.now());
        const bytes = await sink!.written();
        return { bytes, ms: performance.now() - started, pausedMs };
      } finally {
        await cleanUp();
      }
    },
    async abandon() {
      await monitor.command("migrate_cancel").catch(() => undefined);
      // A cancelled migration lets a guest that ran before run again; make sure of it.
      for (let i = 0; i < 50; i++) {
        const info = (await monitor.command("query-migrate").catch(() => ({}))) as { status?: unknown };
        if (info.status !== "cancelling" && info.status !== "pre-switchover" && info.status !== "active") break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await running().catch(() => undefined);
      await cleanUp();
      await fsp.rm(file, { force: true }).catch(() => undefined);
    },
  };
}

/** Waits for QEMU to pause the guest before the switchover, raising the downtime limit by {@link DOWNTIME_STEPS}. */
async function waitForSwitchover(monitor: QmpMonitor, started: number, deadline: number): Promise<void> {
  for (let step = 1; ; step++) {
    const next = DOWNTIME_STEPS[step];
    const until = next ? Math.min(deadline, started + next.afterMs) : deadline;
    try {
      await waitForMigration(monitor, until, "pre-switchover");
      return;
    } catch (error) {
      // A failed or cancelled migration, or the save's own deadline.
      if (!next || until === deadline || performance.now() < until) throw error;
    }
    await monitor.command("migrate-set-parameters", { "downtime-limit": next.limitMs });
  }
}

/** What {@link keepLiveMemoryCheckpoint} needs of the running VM. */
export interface LiveMemoryVm {
  monitor: QmpMonitor;
  runtimeDir: string;
  run: DiskRun;
  grown: boolean;
  /** Moves QEMU's disk writes to the new layer `file` (layer-switch.ts). */
  switchLayer(file: string): Promise<void>;
  /** The record of memory saved with disk checkpoint `generation` (taken while the guest is paused). */
  recordOf(generation: number, saved: { bytes: number; vfs: SuspendState["vfs"] }): SuspendState;
  /** Gondolin's file-system inode table now. */
  vfs(): SuspendState["vfs"];
}

/**
 * Keeps a memory checkpoint of the running guest without stopping it: its memory saved while it
 * runs, its disk switched to a new layer while QEMU has it paused for the last pages, so the
 * published layers match the memory. Returns the disk checkpoint, the kept checkpoint, how long
 * the guest was paused and the memory's bytes. The guest runs on whatever happens; on a failure
 * nothing is kept (a disk checkpoint may have been published, as a live checkpoint publishes).
 */
export async function keepLiveMemoryCheckpoint(
  vm: LiveMemoryVm,
  keep: KeepOptions,
  timeoutMs: number,
): Promise<{ disk: LiveDiskCheckpoint; kept: KeptCheckpoint; pausedMs: number; memoryBytes: number }> {
  const dir = vm.run.dir;
  const temp = path.join(dir, memoryTempName());
  const save = await startLiveMemorySave(vm.monitor, vm.runtimeDir, temp, timeoutMs);
  let vfs: SuspendState["vfs"];
  let disk: LiveDiskCheckpoint;
  let saved: { bytes: number; ms: number; pausedMs: number };
  try {
    disk = await vm.run.liveCheckpoint({
      grown: vm.grown,
      force: true,
      switchLayer: async (file) => {
        try {
          await save.paused();
        } catch (error) {
          throw new LayerSwitchRefused(`QEMU did not pause the guest for its memory: ${messageOf(error)}`, {
            cause: error,
          });
        }
        vfs = vm.vfs();
        await vm.switchLayer(file);
        // QEMU writes the last pages and the device state while the checkpoint is published.
        await save.proceed();
      },
    });
    saved = await save.finish();
  } catch (error) {
    await save.abandon();
    throw new VmError(
      "VM_CHECKPOINT_FAILED",
      `the guest's memory could not be saved while it ran: ${messageOf(error)}`,
      {
        cause: error,
        details: { dir, reason: messageOf(error) },
      },
    );
  }
  try {
    // The record goes with the kept checkpoint only: the disk itself runs on past it.
    await writeSuspendState(dir, temp, vm.recordOf(disk.generation, { bytes: saved.bytes, vfs }));
    const kept = await keepCheckpoint(dir, vm.run.pointer, { ...keep, memory: true });
    return { disk, kept, pausedMs: saved.pausedMs, memoryBytes: saved.bytes };
  } finally {
    await removeSuspendState(dir).catch(() => undefined);
    await fsp.rm(temp, { force: true }).catch(() => undefined);
  }
}
