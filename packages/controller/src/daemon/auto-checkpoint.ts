// Automatic checkpoints of one running instance (`checkpoint.every`): the daemon looks every second
// at whether the guest is in use (actions, previews, terminals, guest CPU, as the idle clock sees
// it) or wrote its disk, and once that adds up to the setting, checkpoints the disk through the
// lifecycle queue, so never beside a start, stop or suspend. A crash then loses at most that much.

import { formatDuration } from "@pi-sandbox/config";
import type { DaemonLogger } from "../log.js";
import { UseLook, type UseSignals } from "./use-look.js";

/**
 * Longest stretch one look may count as use, in ms: the daemon looks every second, and one that
 * was stalled for a minute (a suspended laptop, an overloaded host) did not see a minute of use.
 */
const MAX_LOOK_SPAN_MS = 5_000;

/** What a checkpoint reports (`RunningVm.checkpoint()`'s result has these fields). */
export interface CheckpointOutcome {
  /** The current checkpoint generation afterwards. */
  generation: number;
  /** False when the guest wrote nothing since the last checkpoint (nothing new was published). */
  changed: boolean;
  /** Milliseconds the guest's disk I/O waited for the layer switch. */
  stallMs: number;
  /** Total milliseconds, the guest's sync included. */
  totalMs: number;
  /** Host bytes that became part of the checkpoint. */
  bytes: number;
}

/** What the checkpoint clock sees of the instance besides its use. */
export interface CheckpointSignals extends UseSignals {
  /** When QEMU last wrote the disk, in ms since the epoch; undefined when unknown. */
  diskWrittenAtMs(): number | undefined;
}

/** What the checkpoint clock does to the instance, through the daemon's lifecycle queue. */
export interface CheckpointHost {
  /** `checkpoint.every` of the running instance in ms; null when off, undefined when not an instance. */
  everyMs(): number | null | undefined;
  /** True while a VM runs and the instance reads running. */
  running(): boolean;
  /** True while lifecycle work is queued or running. */
  busy(): boolean;
  /** Runs work in the lifecycle queue, after what is queued already. */
  enqueue<T>(work: () => Promise<T>): Promise<T>;
  /** Checkpoints the running VM's disk (run inside the queue). */
  checkpoint(): Promise<CheckpointOutcome>;
  /** Records a checkpoint for inspect (`at`: ISO time). */
  checkpointed(outcome: CheckpointOutcome, at: string): Promise<void>;
  /** Records (and logs) a failed checkpoint for inspect: once per kind of failure until one succeeds. */
  failed(error: unknown): Promise<void>;
  /** Log sink. */
  log: DaemonLogger;
}

/** How much guest activity has passed since the last checkpoint, in the caller's clock (ms). Pure. */
export class CheckpointClock {
  readonly #everyMs: number;
  #activeMs = 0;
  #lastLook: number;

  /** A clock that starts at `now` with no activity counted. */
  constructor(everyMs: number, now: number) {
    this.#everyMs = everyMs;
    this.#lastLook = now;
  }

  /** The setting, in ms. */
  get everyMs(): number {
    return this.#everyMs;
  }

  /** Activity counted since the last checkpoint, in ms. */
  get activeMs(): number {
    return this.#activeMs;
  }

  /** One look at `now`: the time since the last look counts when the instance was `active`. */
  observe(now: number, active: boolean): void {
    const span = Math.min(Math.max(0, now - this.#lastLook), MAX_LOOK_SPAN_MS);
    this.#lastLook = now;
    if (active) this.#activeMs += span;
  }

  /** True once the activity adds up to the setting. */
  due(): boolean {
    return this.#activeMs >= this.#everyMs;
  }

  /** Starts counting again from `now` (after a checkpoint, or a failed one). */
  restart(now: number): void {
    this.#activeMs = 0;
    this.#lastLook = now;
  }
}

/** Automatic checkpoints of one instance. */
export class AutoCheckpoint {
  readonly #host: CheckpointHost;
  readonly #signals: CheckpointSignals;
  readonly #now: () => number;
  readonly #use: UseLook;
  #clock: CheckpointClock | undefined;
  /** Actions in flight, and whether one ended since the last look. */
  #calls = 0;
  #usedSinceLook = false;
  /** The disk's last write as the last look saw it. */
  #diskWrittenAt: number | undefined;
  /** From the decision until the checkpoint is done (queued or running). */
  #pending = false;
  /** The code of the last failure recorded, until a checkpoint succeeds: recorded once, logged each time. */
  #failedCode: string | undefined;

  constructor(host: CheckpointHost, signals: CheckpointSignals, now: () => number = Date.now) {
    this.#host = host;
    this.#signals = signals;
    this.#now = now;
    this.#use = new UseLook(signals);
  }

  /** True from the decision to checkpoint until it is done: the queue's work then is this clock's. */
  get pending(): boolean {
    return this.#pending;
  }

  /** An action begins; the returned function ends it (it counts as use either way). */
  callStarted(): () => void {
    this.#calls++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#calls--;
      this.#usedSinceLook = true;
    };
  }

  /** One look, every second; checkpoints the disk when enough activity has added up. */
  async tick(): Promise<void> {
    if (this.#pending) return;
    const every = this.#host.everyMs();
    const now = this.#now();
    if (every === null || every === undefined || !this.#host.running()) {
      this.#clock = undefined;
      return;
    }
    // Lifecycle work (a start finishing, a stop beginning) is not the guest's: neither counted
    // nor a moment to checkpoint. What was counted before it stays.
    if (this.#host.busy()) {
      this.#clock?.observe(now, false);
      return;
    }
    if (this.#clock?.everyMs !== every) {
      this.#clock = new CheckpointClock(every, now);
      this.#use.reset();
      this.#diskWrittenAt = this.#signals.diskWrittenAtMs();
    }
    const clock = this.#clock;
    const look = this.#use.look(now, this.#calls);
    const written = this.#signals.diskWrittenAtMs();
    const wrote = written !== undefined && this.#diskWrittenAt !== undefined && written > this.#diskWrittenAt;
    this.#diskWrittenAt = written;
    clock.observe(now, look.busy !== undefined || look.usedAt !== undefined || this.#usedSinceLook || wrote);
    this.#usedSinceLook = false;
    if (!clock.due()) return;
    this.#pending = true;
    try {
      await this.#host.enqueue(() => this.#checkpoint(clock));
    } catch {
      // The queue refused it: the daemon is exiting (a stop or destroy came first).
    } finally {
      this.#pending = false;
      clock.restart(this.#now());
      // The checkpoint itself gave QEMU a new layer: that is not the guest writing.
      this.#diskWrittenAt = this.#signals.diskWrittenAtMs();
    }
  }

  async #checkpoint(clock: CheckpointClock): Promise<void> {
    // Queued behind lifecycle work that began meanwhile (a stop, a suspend): its VM is gone.
    if (!this.#host.running()) return;
    const log = this.#host.log;
    try {
      const outcome = await this.#host.checkpoint();
      const after = `after ${formatDuration(clock.activeMs)} of use`;
      log.info(
        outcome.changed
          ? `checkpoint ${outcome.generation} ${after}: guest stalled ${Math.round(outcome.stallMs)} ms, ${(outcome.bytes / 2 ** 20).toFixed(1)} MiB, ${Math.round(outcome.totalMs)} ms in all`
          : `checkpoint ${outcome.generation} still holds everything (nothing written ${after})`,
      );
      this.#failedCode = undefined;
      await this.#host.checkpointed(outcome, new Date().toISOString());
    } catch (error) {
      const code = (error as { code?: unknown } | null)?.code;
      const key = typeof code === "string" ? code : "unknown";
      // Recorded (and logged by the record) once; a repeat is only logged.
      if (key !== this.#failedCode) {
        this.#failedCode = key;
        await this.#host.failed(error).catch(() => undefined);
      } else {
        log.warn(`automatic checkpoint failed again; the previous one is still current: ${String(error)}`);
      }
    }
  }
}
