// The idle clock of one running instance: each look says what (if anything) uses it, and the clock
// says how long nothing has, and when that reaches `idle.suspendAfter`. Pure: the caller passes
// the time, so tests drive it without waiting.

/** One look at an instance: what uses it now, or nothing. */
export interface IdleLook {
  /** What uses the instance now ("a preview WebSocket is open"); undefined when nothing does. */
  busy: string | undefined;
  /**
   * Something that used it and is over, and when (ms, same clock as `now`): a command that ended
   * since the last look. The clock restarts from then if that is later than where it stands.
   */
  usedAt?: number;
}

/** How long an instance has gone unused, in the caller's clock (ms). */
export class IdleClock {
  readonly #suspendAfterMs: number;
  /** Since when nothing has used the instance. */
  #since: number;
  #busy: string | undefined;

  /** A clock that starts now (`now` in ms): a fresh start counts as use. */
  constructor(suspendAfterMs: number, now: number) {
    this.#suspendAfterMs = suspendAfterMs;
    this.#since = now;
  }

  /** The setting, in ms. */
  get suspendAfterMs(): number {
    return this.#suspendAfterMs;
  }

  /** Records one look at `now`: anything busy restarts the clock at `now`. */
  observe(now: number, look: IdleLook): void {
    this.#busy = look.busy;
    if (look.busy !== undefined) this.#since = Math.max(this.#since, now);
    else if (look.usedAt !== undefined) this.#since = Math.max(this.#since, Math.min(look.usedAt, now));
  }

  /** Use at `now` that no look would see (an action that came and went): restarts the clock. */
  used(now: number): void {
    this.#since = Math.max(this.#since, now);
  }

  /** How long nothing has used it, in ms; 0 while the last look found it busy. */
  idleForMs(now: number): number {
    return this.#busy === undefined ? Math.max(0, now - this.#since) : 0;
  }

  /** What the last look found busy, if anything. */
  get busy(): string | undefined {
    return this.#busy;
  }

  /** True once nothing has used it for the whole `suspendAfterMs`. */
  due(now: number): boolean {
    return this.idleForMs(now) >= this.#suspendAfterMs;
  }
}
