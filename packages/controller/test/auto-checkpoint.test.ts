// The checkpoint clock, driven by an injected clock and fake signals: what counts as activity, when
// the disk is checkpointed, that it goes through the lifecycle queue and never beside lifecycle
// work, and what a failure leaves.
import type { PreviewActivity } from "@pi-sandbox/ingress";
import {
  AutoCheckpoint,
  CheckpointClock,
  type CheckpointHost,
  type CheckpointOutcome,
  type CheckpointSignals,
} from "../src/daemon/auto-checkpoint.js";

/** A fake running instance whose signals a test sets; `pass` advances the clock in one-second looks. */
function fakeInstance(everyMs: number | null = 60_000) {
  let now = 1_000_000;
  const world = {
    running: true,
    /** Lifecycle work queued or running. */
    busy: false,
    previews: { open: 0, seen: 0 } as Pick<PreviewActivity, "open" | "seen">,
    terminals: 0,
    cpuMs: 0,
    diskWrittenAt: 500_000 as number | undefined,
    failWith: undefined as (Error & { code?: string }) | undefined,
    /** The clock's times of the checkpoints taken. */
    checkpoints: [] as number[],
    recorded: [] as CheckpointOutcome[],
    failures: [] as unknown[],
    queued: 0,
    /** Runs before queued work: lifecycle work queued ahead of the checkpoint. */
    ahead: undefined as (() => void) | undefined,
    log: [] as string[],
  };
  const host: CheckpointHost = {
    everyMs: () => everyMs,
    running: () => world.running,
    busy: () => world.busy,
    enqueue: async (work) => {
      world.queued++;
      world.ahead?.();
      return work();
    },
    checkpoint: async () => {
      if (world.busy) throw new Error("a checkpoint ran beside lifecycle work");
      if (world.failWith) throw world.failWith;
      world.checkpoints.push(now);
      // The checkpoint gives QEMU a new layer, which is not the guest writing.
      world.diskWrittenAt = now;
      return { generation: world.checkpoints.length, changed: true, stallMs: 12.4, totalMs: 830, bytes: 3 * 2 ** 20 };
    },
    checkpointed: async (outcome) => void world.recorded.push(outcome),
    failed: async (error) => void world.failures.push(error),
    log: {
      info: (message: string) => world.log.push(message),
      warn: (message: string) => world.log.push(`warn: ${message}`),
    } as unknown as CheckpointHost["log"],
  };
  const signals: CheckpointSignals = {
    previews: () => world.previews,
    terminals: () => world.terminals,
    cpuMs: () => world.cpuMs,
    diskWrittenAtMs: () => world.diskWrittenAt,
  };
  const clock = new AutoCheckpoint(host, signals, () => now);
  /** `ms` in one-second looks; the guest uses `cpuPercent` of a core and, with `writes`, writes its disk. */
  const pass = async (ms: number, options: { cpuPercent?: number; writes?: boolean } = {}) => {
    for (let t = 0; t < ms; t += 1000) {
      now += 1000;
      world.cpuMs += (options.cpuPercent ?? 2) * 10;
      if (options.writes) world.diskWrittenAt = now;
      await clock.tick();
    }
  };
  return { world, clock, pass };
}

test("the clock counts only active time, at most a few seconds per look, and restarts after a checkpoint", () => {
  const clock = new CheckpointClock(10_000, 0);
  clock.observe(1_000, true);
  clock.observe(2_000, false);
  clock.observe(60_000, true);
  expect(clock.activeMs).toBe(6_000);
  expect(clock.due()).toBe(false);
  clock.observe(65_000, true);
  expect(clock.due()).toBe(true);
  clock.restart(66_000);
  expect([clock.activeMs, clock.due()]).toEqual([0, false]);
});

test("a guest writing its disk is checkpointed once per period of writing, and the log says how long it stalled", async () => {
  const { world, pass } = fakeInstance();
  await pass(59_000, { writes: true });
  expect(world.checkpoints).toHaveLength(0);
  await pass(2_000, { writes: true });
  expect(world.checkpoints).toHaveLength(1);
  expect(world.queued).toBe(1);
  expect(world.recorded).toEqual([expect.objectContaining({ generation: 1, stallMs: 12.4 })]);
  expect(world.log).toEqual(["checkpoint 1 after 1m of use: guest stalled 12 ms, 3.0 MiB, 830 ms in all"]);
  await pass(61_000, { writes: true });
  expect(world.checkpoints).toHaveLength(2);
});

test("an idle guest is never checkpointed, however long it runs", async () => {
  const { world, pass } = fakeInstance();
  await pass(30 * 60_000);
  expect(world.checkpoints).toEqual([]);
  expect(world.queued).toBe(0);
});

test("guest CPU, an open preview, a terminal and actions count as use, and use adds up across idle gaps", async () => {
  const { world, clock, pass } = fakeInstance();
  await pass(20_000, { cpuPercent: 95 });
  await pass(120_000);
  world.previews = { open: 1, seen: 1 };
  await pass(15_000);
  world.previews = { open: 0, seen: 1 };
  world.terminals = 1;
  await pass(15_000);
  world.terminals = 0;
  expect(world.checkpoints).toHaveLength(0);
  const ended = clock.callStarted();
  await pass(12_000);
  ended();
  expect(world.checkpoints).toHaveLength(1);
});

test("never beside lifecycle work: nothing counts or runs while it is under way, and a stop queued first wins", async () => {
  const { world, pass } = fakeInstance();
  await pass(50_000, { writes: true });
  world.busy = true;
  await pass(5 * 60_000, { writes: true });
  expect(world.checkpoints).toHaveLength(0);
  world.busy = false;
  // A stop queued just before the checkpoint: by the checkpoint's turn, no VM runs.
  world.ahead = () => void (world.running = false);
  await pass(12_000, { writes: true });
  expect(world.queued).toBe(1);
  expect(world.checkpoints).toHaveLength(0);
  expect(world.log).toEqual([]);
  // Not running: nothing more is counted or queued.
  await pass(5 * 60_000, { writes: true });
  expect(world.queued).toBe(1);
});

test("a failure is recorded once until a checkpoint succeeds, then only logged, and the clock goes on", async () => {
  const { world, pass } = fakeInstance();
  world.failWith = Object.assign(new Error("the host file system / is full"), { code: "VM_HOST_DISK_FULL" });
  await pass(61_000, { writes: true });
  await pass(61_000, { writes: true });
  expect(world.failures).toHaveLength(1);
  expect(world.log.filter((line) => line.startsWith("warn: automatic checkpoint failed again"))).toHaveLength(1);
  world.failWith = undefined;
  await pass(61_000, { writes: true });
  expect(world.checkpoints).toHaveLength(1);
  world.failWith = Object.assign(new Error("full again"), { code: "VM_HOST_DISK_FULL" });
  await pass(61_000, { writes: true });
  expect(world.failures).toHaveLength(2);
});

test("with checkpoint.every off nothing is ever checkpointed", async () => {
  const { world, pass } = fakeInstance(null);
  await pass(10 * 60_000, { writes: true, cpuPercent: 95 });
  expect(world.queued).toBe(0);
});
