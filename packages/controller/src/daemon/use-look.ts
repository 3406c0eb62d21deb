// One cheap look at what uses a running instance (actions, previews, terminals, guest CPU; never a
// round trip to the guest): the notion of use that the idle clock and the checkpoint clock share.

import { LIMITS } from "@pi-sandbox/config";
import type { PreviewActivity } from "@pi-sandbox/ingress";
import type { IdleLook } from "./idle-clock.js";

/** What the daemon can see of an instance's use without asking the guest. */
export interface UseSignals {
  /** The previews' traffic; undefined without previews. */
  previews(): Pick<PreviewActivity, "open" | "seen"> | undefined;
  /** Terminal sessions open now. */
  terminals(): number;
  /** CPU time the VM (its QEMU) has used so far, in ms; undefined when it cannot be read. */
  cpuMs(): number | undefined;
}

/**
 * Looks at an instance once a second. Keeps what a look needs from the last ones (the CPU window,
 * the previews' request count), so each clock has its own.
 */
export class UseLook {
  readonly #signals: UseSignals;
  /** CPU readings of the last window: [time, cpuMs]. */
  #cpu: [number, number][] = [];
  #previewsSeen: number | undefined;

  constructor(signals: UseSignals) {
    this.#signals = signals;
  }

  /** What uses the instance at `now` (ms) with `calls` actions in flight. */
  look(now: number, calls: number): IdleLook {
    if (calls > 0) return { busy: "an action runs" };
    const previews = this.#signals.previews();
    const seen = this.#previewsSeen;
    this.#previewsSeen = previews?.seen;
    if (previews && previews.open > 0) return { busy: "a preview request or WebSocket is open" };
    const terminals = this.#signals.terminals();
    if (terminals > 0) return { busy: `${terminals} terminal session${terminals === 1 ? " is" : "s are"} open` };
    const cpu = this.#cpuPercent(now);
    if (cpu !== undefined && cpu >= LIMITS.idleCpuPercent) return { busy: `the guest uses ${cpu.toFixed(0)} % CPU` };
    return { busy: undefined, ...(previews && seen !== undefined && previews.seen !== seen ? { usedAt: now } : {}) };
  }

  /** Forgets the window (a new run, or the clock was off). */
  reset(): void {
    this.#cpu = [];
    this.#previewsSeen = undefined;
  }

  /** The VM's CPU use over the last window, in percent of one core; undefined until a second has passed. */
  #cpuPercent(now: number): number | undefined {
    const cpuMs = this.#signals.cpuMs();
    if (cpuMs === undefined) return undefined;
    this.#cpu.push([now, cpuMs]);
    while (this.#cpu.length > 2 && this.#cpu[1]![0] <= now - LIMITS.idleCpuWindowMs) this.#cpu.shift();
    const [start, startCpu] = this.#cpu[0]!;
    const span = now - start;
    return span >= 1000 ? ((cpuMs - startCpu) / span) * 100 : undefined;
  }
}
