// Preview traffic for the ledger, summarised per minute: how many requests and WebSocket opens the
// instance's previews received, and the bytes their connections carried each way, in each minute
// that had any. The gateway counts them (ingress's activity meter); this looks at its counts
// once a minute.
import type { PreviewActivity } from "@pi-sandbox/ingress";

/** How long one summary covers. */
export const PREVIEW_TALLY_MS = 60_000;

/** The counts a summary is the difference of. */
const COUNTS = ["requests", "upgrades", "bytesIn", "bytesOut"] as const;
type Counts = Record<(typeof COUNTS)[number], number>;

/** One minute's summary. */
export type PreviewMinute = { from: string } & Counts;

/** The per-minute summary of one instance's previews. */
export class PreviewTally {
  #since: number;
  #last: Counts = { requests: 0, upgrades: 0, bytesIn: 0, bytesOut: 0 };

  constructor(now: number) {
    this.#since = now;
  }

  /**
   * One look at `now` (every second is fine): once a minute has passed, what the gateway counted
   * since the last summary, or undefined when it counted nothing (or there is no gateway). A
   * new gateway (a restart) counts from zero again: a count below the last one is taken whole.
   */
  look(now: number, activity: PreviewActivity | undefined): PreviewMinute | undefined {
    if (now - this.#since < PREVIEW_TALLY_MS) return undefined;
    const from = new Date(this.#since).toISOString();
    this.#since = now;
    const counts = { requests: 0, upgrades: 0, bytesIn: 0, bytesOut: 0 };
    const restarted =
      activity !== undefined && activity.requests + activity.upgrades < this.#last.requests + this.#last.upgrades;
    for (const key of COUNTS) {
      const seen = activity?.[key] ?? 0;
      counts[key] = restarted || seen < this.#last[key] ? seen : seen - this.#last[key];
      this.#last[key] = seen;
    }
    return COUNTS.some((key) => counts[key] > 0) ? { from, ...counts } : undefined;
  }
}
