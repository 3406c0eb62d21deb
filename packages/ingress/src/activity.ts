// What a gateway's previews are doing, for an owner that suspends an idle guest: requests and
// WebSockets open now, and a count of every one seen. The owner keeps the clock; this only counts.

/** A snapshot of a gateway's traffic (see `PreviewGateway.activity`). */
export interface PreviewActivity {
  /** HTTP requests not yet answered and upgraded connections (WebSockets) still open, now. */
  open: number;
  /** HTTP requests and upgrades received since the gateway opened; compare two snapshots to see new ones. */
  seen: number;
}

/** Counts the requests and upgrades of every listener of one gateway. */
export class ActivityMeter {
  #open = 0;
  #seen = 0;

  /** Counts one request or upgrade as open from now; the returned function (idempotent) ends it. */
  begin(): () => void {
    this.#open++;
    this.#seen++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#open--;
      // Its end is news too: a request that began and ended between two snapshots was seen.
      this.#seen++;
    };
  }

  /** The counts now. */
  snapshot(): PreviewActivity {
    return { open: this.#open, seen: this.#seen };
  }
}
