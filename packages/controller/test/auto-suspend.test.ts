// The idle clock and the auto-suspend decision, driven by an injected clock and fake signals: what
// keeps an instance awake, when it suspends itself, and how a request wakes it.
import type { PreviewActivity } from "@pi-sandbox/ingress";
import type { AgentActivity } from "@pi-sandbox/supervisor";
import { AutoSuspend, type IdleHost, type IdleSignals } from "../src/daemon/auto-suspend.js";
import { IdleClock } from "../src/daemon/idle-clock.js";

const silent = { info: () => undefined, warn: () => undefined, child: () => silent } as unknown as IdleHost["log"];

/** A fake instance: running until suspended, with signals a test sets. */
function fakeInstance(suspendAfterMs = 20_000) {
  let now = 1_000_000;
  const world = {
    running: true,
    suspends: 0,
    starts: 0,
    /** Lifecycle work queued or running. */
    busy: false,
    previews: { open: 0, seen: 0 } as Pick<PreviewActivity, "open" | "seen">,
    terminals: 0,
    cpuMs: 0,
    jobs: { runningJobs: 0 } as AgentActivity | undefined,
    /** When set, the guest's last command ended then (jobsIdleMs follows the clock). */
    jobsEndedAt: undefined as number | undefined,
    now: () => 0,
  };
  const host: IdleHost = {
    suspendAfterMs: () => suspendAfterMs,
    running: () => world.running,
    busy: () => world.busy,
    enqueue: (work) => work(),
    suspend: async () => {
      world.suspends++;
      world.running = false;
    },
    start: async () => {
      world.starts++;
      world.running = true;
    },
    log: silent,
  };
  const signals: IdleSignals = {
    previews: () => world.previews,
    terminals: () => world.terminals,
    cpuMs: () => world.cpuMs,
    jobs: async () =>
      world.jobsEndedAt === undefined ? world.jobs : { runningJobs: 0, jobsIdleMs: now - world.jobsEndedAt },
  };
  const idle = new AutoSuspend(host, signals, () => now);
  Object.assign(world, { now: () => now });
  /** Advances the clock by `ms` in one-second looks, the guest using `cpuPercent` of a core. */
  const pass = async (ms: number, cpuPercent = 2) => {
    for (let t = 0; t < ms; t += 1000) {
      now += 1000;
      world.cpuMs += cpuPercent * 10;
      await idle.tick();
    }
  };
  return { world, idle, pass, host };
}

describe("the idle clock", () => {
  test("counts from the last use, reads 0 while something is busy, and is due after the whole period", () => {
    const clock = new IdleClock(20_000, 0);
    clock.observe(5_000, { busy: undefined });
    expect(clock.idleForMs(5_000)).toBe(5_000);
    clock.observe(8_000, { busy: "an action runs" });
    expect(clock.idleForMs(8_000)).toBe(0);
    clock.observe(9_000, { busy: undefined });
    expect(clock.idleForMs(27_000)).toBe(19_000);
    expect(clock.due(27_000)).toBe(false);
    expect(clock.due(28_000)).toBe(true);
  });

  test("a command that ended a while ago restarts the clock from when it ended, never later than now", () => {
    const clock = new IdleClock(20_000, 0);
    clock.observe(30_000, { busy: undefined, usedAt: 25_000 });
    expect(clock.idleForMs(30_000)).toBe(5_000);
    clock.observe(31_000, { busy: undefined, usedAt: 10_000 });
    expect(clock.idleForMs(31_000)).toBe(6_000);
  });
});

describe("auto-suspend", () => {
  test("an instance nobody uses suspends itself once, after the whole period", async () => {
    const { world, idle, pass } = fakeInstance();
    await pass(19_000);
    expect(world.suspends).toBe(0);
    expect(idle.reading()?.idleForMs).toBeGreaterThanOrEqual(18_000);
    await pass(2_000);
    expect(world.suspends).toBe(1);
    expect(idle.asleep).toBe(true);
    expect(idle.reading()).toBeUndefined();
    await pass(30_000);
    expect(world.suspends).toBe(1);
  });

  test("a guest busy on its CPU is never suspended, and says why", async () => {
    const { world, idle, pass } = fakeInstance();
    await pass(60_000, 95);
    expect(world.suspends).toBe(0);
    expect(idle.reading()?.busy).toMatch(/^the guest uses 9\d % CPU$/);
  });

  test("an open WebSocket, a terminal session, an action or a running command each keep it awake", async () => {
    const { world, idle, pass } = fakeInstance();
    world.previews = { open: 1, seen: 1 };
    await pass(30_000);
    expect(idle.reading()?.busy).toBe("a preview request or WebSocket is open");
    world.previews = { open: 0, seen: 2 };
    world.terminals = 1;
    await pass(30_000);
    expect(idle.reading()?.busy).toBe("1 terminal session is open");
    world.terminals = 0;
    const ended = idle.callStarted();
    await pass(30_000);
    expect(idle.reading()?.busy).toBe("an action runs");
    ended();
    world.jobs = { runningJobs: 2, jobsIdleMs: 0 };
    await pass(30_000);
    expect(world.suspends).toBe(0);
    expect(idle.reading()?.busy).toBe("2 commands run (exec)");
    // The guest is asked again every 10 s while it reported a command running; then the period starts.
    world.jobsEndedAt = world.now() - 3_000;
    await pass(10_000);
    expect(world.suspends).toBe(0);
    expect(idle.reading()?.busy).toBeUndefined();
    await pass(21_000);
    expect(world.suspends).toBe(1);
  });

  test("lifecycle work shows no clock and counts as use: the clock starts when it is done", async () => {
    const { world, idle, pass } = fakeInstance();
    world.busy = true;
    await pass(30_000);
    expect(world.suspends).toBe(0);
    expect(idle.reading()).toBeUndefined();
    world.busy = false;
    await pass(1_000);
    expect(idle.reading()).toEqual({ idleForMs: 0 });
    await pass(19_000);
    expect(world.suspends).toBe(0);
    await pass(2_000);
    expect(world.suspends).toBe(1);
  });

  test("preview requests that came and went restart the clock", async () => {
    const { world, idle, pass } = fakeInstance();
    await pass(15_000);
    world.previews = { open: 0, seen: 2 };
    await pass(1_000);
    expect(idle.reading()?.idleForMs).toBeLessThanOrEqual(1_000);
    await pass(15_000);
    expect(world.suspends).toBe(0);
    await pass(6_000);
    expect(world.suspends).toBe(1);
  });

  test("a request open when the suspend is decided wins: the instance stays up", async () => {
    const { world, idle, pass } = fakeInstance();
    // The request arrives between the last look and the decision (while the guest is asked).
    const signalsJobs = world;
    let asked = 0;
    Object.defineProperty(signalsJobs, "jobs", {
      get() {
        asked++;
        if (asked === 1) world.previews = { open: 1, seen: 1 };
        return { runningJobs: 0 };
      },
    });
    await pass(21_000);
    expect(world.suspends).toBe(0);
    expect(idle.asleep).toBe(false);
  });

  test("the first request after a suspend wakes it once, however many arrive together", async () => {
    const { world, idle, pass } = fakeInstance();
    expect(idle.wake()).toBeUndefined();
    await pass(21_000);
    expect(idle.asleep).toBe(true);
    const first = idle.wake();
    const second = idle.wake();
    expect(first).toBe(second);
    await first;
    expect(world.starts).toBe(1);
    expect(idle.asleep).toBe(false);
    expect(idle.wake()).toBeUndefined();
    await pass(10_000);
    expect(world.suspends).toBe(1);
  });

  test("a preview request goes on once the guest is back from memory, before the rest of the start", async () => {
    const { world, idle, pass, host } = fakeInstance();
    await pass(21_000);
    let finish!: () => void;
    host.start = async () => {
      world.running = true;
      idle.guestResumed();
      await new Promise<void>((resolve) => (finish = resolve));
    };
    const action = idle.wake()!;
    let actionDone = false;
    void action.then(() => (actionDone = true));
    await idle.wake({ early: true });
    expect(actionDone).toBe(false);
    finish();
    await action;
    expect(idle.asleep).toBe(false);
  });

  test("off, or not running: no clock, no suspend", async () => {
    const { world, idle, pass } = fakeInstance();
    world.running = false;
    await pass(60_000);
    expect(world.suspends).toBe(0);
    expect(idle.reading()).toBeUndefined();
  });
});
