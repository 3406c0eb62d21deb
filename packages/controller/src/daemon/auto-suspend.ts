// Auto-suspend of one instance (`idle.suspendAfter`): the daemon looks every second at what uses
// the instance (actions, previews, terminals, guest CPU, and the guest's commands before deciding),
// suspends it once nothing has for the whole period, and wakes it for the next preview request or
// action. The previews stay bound meanwhile (by the daemon, or the waker once it parked the instance:
// parking.ts); the clock itself is idle-clock.ts.

import { formatDuration } from "@pi-sandbox/config";
import type { AgentActivity } from "@pi-sandbox/supervisor";
import type { IdleReading } from "../wire.js";
import { IdleClock } from "./idle-clock.js";
import { UseLook, type UseSignals } from "./use-look.js";
import type { DaemonLogger } from "../log.js";

/** How often the guest is asked again about a command it reported running, in ms. */
const JOBS_RECHECK_MS = 10_000;

/** What the daemon can see of an instance's use. Each is cheap except `jobs`, asked only before deciding. */
export interface IdleSignals extends UseSignals {
  /** The guest's exec handles and setup/resume runs (one round trip to the agent). */
  jobs(): Promise<AgentActivity | undefined>;
}

/** What auto-suspend does to the instance, through the daemon's lifecycle queue. */
export interface IdleHost {
  /** `idle.suspendAfter` of the instance in ms, undefined when off. */
  suspendAfterMs(): number | undefined;
  /** True while a VM runs and the instance reads running (not starting, stopping, …). */
  running(): boolean;
  /** True while lifecycle work is queued or running. */
  busy(): boolean;
  /** Runs work in the lifecycle queue, after what is queued already. */
  enqueue<T>(work: () => Promise<T>): Promise<T>;
  /** Suspends the instance keeping its previews bound (run inside the queue). */
  suspend(): Promise<void>;
  /** Starts (resumes) it (run inside the queue); does nothing when it runs. */
  start(): Promise<void>;
  /** Log sink. */
  log: DaemonLogger;
}

/** Auto-suspend and wake of one instance. */
export class AutoSuspend {
  readonly #host: IdleHost;
  readonly #signals: IdleSignals;
  readonly #now: () => number;
  readonly #use: UseLook;
  #clock: IdleClock | undefined;
  /** Actions in flight. */
  #calls = 0;
  /** True while deciding (the agent is being asked): the next tick waits. */
  #deciding = false;
  /**
   * From the moment a suspend is decided until a start completes: previews and actions wait for
   * (and trigger) a wake. Set before the last check for open requests, in the same tick.
   */
  #asleep = false;
  #waking: Promise<void> | undefined;
  /** Resolves when the wake's boot resumed the guest (see {@link wake}'s `early`). */
  #resumed: Promise<void> | undefined;
  #onResumed: (() => void) | undefined;
  /** What the guest's last answer about its commands found running, if anything. */
  #jobsBusy: string | undefined;
  #jobsAskedAt = 0;

  constructor(host: IdleHost, signals: IdleSignals, now: () => number = Date.now) {
    this.#host = host;
    this.#signals = signals;
    this.#now = now;
    this.#use = new UseLook(signals);
  }

  /** True from the decision to suspend until the next start completes. */
  get asleep(): boolean {
    return this.#asleep;
  }

  /** The clock as a pong reports it; undefined while off or not running. */
  reading(): IdleReading | undefined {
    const clock = this.#clock;
    if (!clock || this.#asleep) return undefined;
    const now = this.#now();
    return { idleForMs: clock.idleForMs(now), ...(clock.busy ? { busy: clock.busy } : {}) };
  }

  /** An action begins; the returned function ends it. Counted before any wake it asks for. */
  callStarted(): () => void {
    this.#calls++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#calls--;
      this.#clock?.used(this.#now());
    };
  }

  /**
   * Undefined while the instance is awake; otherwise the wake every waiting preview request and
   * action shares: a start queued after the suspend (if one is still running). With `early` (a
   * preview request) it resolves as soon as the guest is back from its saved memory, its services
   * running, without waiting for the agent's channel and the rest of the start.
   */
  wake(options: { early?: boolean } = {}): Promise<void> | undefined {
    if (!this.#asleep) return undefined;
    if (!this.#waking) {
      this.#resumed = new Promise((resolve) => (this.#onResumed = resolve));
      this.#waking = this.#host
        .enqueue(() => this.#host.start())
        .then(() => this.started())
        .finally(() => {
          this.#waking = undefined;
        });
    }
    return options.early && this.#resumed ? Promise.race([this.#waking, this.#resumed]) : this.#waking;
  }

  /**
   * A fresh daemon took the previews of its parked instance back (parking.ts): asleep as after the
   * suspend its last daemon decided, so the next preview request or action wakes it.
   */
  parked(): void {
    this.#asleep = true;
    this.#reset();
  }

  /** The wake's boot resumed the guest from its saved memory (its services run again). */
  guestResumed(): void {
    this.#onResumed?.();
  }

  /** A start (or create) completed: awake again, with a fresh clock. */
  started(): void {
    this.#asleep = false;
    this.#onResumed?.();
    this.#resumed = undefined;
    this.#onResumed = undefined;
    this.#reset();
  }

  /** One look, every second; suspends the instance when its time has come. */
  async tick(): Promise<void> {
    if (this.#deciding || this.#asleep) return;
    const after = this.#host.suspendAfterMs();
    const now = this.#now();
    // Lifecycle work (a create or start still finishing) is use: the clock starts once it is done,
    // so the view a create or start returns never shows a clock stopped by the work itself.
    if (after === undefined || !this.#host.running() || this.#host.busy()) {
      this.#reset();
      return;
    }
    if (this.#clock?.suspendAfterMs !== after) this.#clock = new IdleClock(after, now);
    const clock = this.#clock;
    const look = this.#use.look(now, this.#calls);
    // A command the guest reported running keeps the instance busy until the guest says otherwise,
    // asked again every JOBS_RECHECK_MS rather than every second.
    const recheck = look.busy === undefined && this.#jobsBusy !== undefined;
    if (recheck && now - this.#jobsAskedAt < JOBS_RECHECK_MS) clock.observe(now, { busy: this.#jobsBusy });
    else clock.observe(now, look);
    if (!recheck && !clock.due(now)) return;
    if (recheck && now - this.#jobsAskedAt < JOBS_RECHECK_MS) return;
    this.#deciding = true;
    try {
      // Only now ask the guest: one round trip per period (or per recheck), not one a second.
      await this.#askJobs(clock);
      const then = this.#now();
      if (!clock.due(then) || !this.#host.running() || this.#host.busy()) return;
      await this.#suspend(clock.idleForMs(then));
    } finally {
      this.#deciding = false;
    }
  }

  /** Asks the guest about its commands: running ones keep the clock at 0, an ended one restarts it then. */
  async #askJobs(clock: IdleClock): Promise<void> {
    const jobs = await this.#signals.jobs().catch(() => undefined);
    const then = this.#now();
    this.#jobsAskedAt = then;
    this.#jobsBusy = jobs?.runningJobs
      ? `${jobs.runningJobs} command${jobs.runningJobs === 1 ? " runs" : "s run"} (exec)`
      : undefined;
    if (this.#jobsBusy) clock.observe(then, { busy: this.#jobsBusy });
    else if (jobs?.jobsIdleMs !== undefined) clock.observe(then, { busy: undefined, usedAt: then - jobs.jobsIdleMs });
  }

  async #suspend(idleForMs: number): Promise<void> {
    this.#asleep = true;
    // A request or action that began before the flag was set is still in flight: it wins.
    if ((this.#signals.previews()?.open ?? 0) > 0 || this.#calls > 0 || this.#signals.terminals() > 0) {
      this.#asleep = false;
      this.#host.log.info("a request, action or terminal came as the instance was about to suspend: it stays up");
      return;
    }
    this.#host.log.info(
      `unused for ${formatDuration(idleForMs)} (idle.suspendAfter ${formatDuration(this.#clock?.suspendAfterMs ?? 0)}): suspending; previews stay bound and wake it`,
    );
    try {
      await this.#host.enqueue(() => this.#host.suspend());
    } catch (error) {
      // The suspend recorded its own failure (the instance reads stopped or failed, the daemon exits).
      this.#host.log.warn(`auto-suspend failed: ${String(error)}`);
    }
  }

  #reset(): void {
    this.#clock = undefined;
    this.#jobsBusy = undefined;
    this.#use.reset();
  }
}
