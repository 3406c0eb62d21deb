// Preview traffic for the ledger, summarised per minute: how many requests and WebSocket upgrades
// the instance's previews received in each minute they received any. The gateway counts them
// (ingress's activity meter); this looks at its count once a minute.
import type { PreviewActivity } from "@pi-sandbox/ingress";

/** How long one summary covers. */
export const PREVIEW_TALLY_MS = 60_000;

/** The per-minute summary of one instance's previews. */
export class PreviewTally {
  #since: number;
  #seen = 0;

  constructor(now: number) {
    this.#since = now;
  }

  /**
   * One look at `now` (every second is fine): once a minute has passed, what the gateway received
   * since the last summary, or undefined when nothing (or no gateway). A new gateway (a restart)
   * counts from zero again.
   */
  look(now: number, activity: PreviewActivity | undefined): { from: string; requests: number } | undefined {
    if (now - this.#since < PREVIEW_TALLY_MS) return undefined;
    const from = new Date(this.#since).toISOString();
    this.#since = now;
    const seen = activity?.seen ?? 0;
    const requests = seen >= this.#seen ? seen - this.#seen : seen;
    this.#seen = seen;
    return requests > 0 ? { from, requests } : undefined;
  }
}
