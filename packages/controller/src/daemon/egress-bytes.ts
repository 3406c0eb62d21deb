// The body bytes of the guest's HTTP(S) exchanges for the ledger, summarised per destination
// (host, port, protocol) per minute, as preview traffic is (preview-tally.ts): the VM reports each
// exchange as it ends (its counts are the host's, never the guest's); one entry per destination
// that had any, at most a minute after the first, or sooner when the instance changes state.
import type { EgressBytes } from "@pi-sandbox/vm";

/** How long one summary covers at most. */
export const EGRESS_BYTES_MS = 60_000;

/** What one destination's exchanges came to in one summary. */
export type EgressBytesSummary = Pick<EgressBytes, "host" | "port" | "protocol" | "bytesOut" | "bytesIn"> & {
  /** Exchanges (request hops) that ended. */
  exchanges: number;
  /** When the summary's first exchange ended (ISO time). */
  from: string;
};

/** The summaries being added up; `flush` is called at most a minute after the first exchange. */
export class EgressBytesTally {
  #open = new Map<string, EgressBytesSummary>();
  #timer: NodeJS.Timeout | undefined;

  constructor(
    readonly write: (summary: EgressBytesSummary) => void,
    readonly everyMs = EGRESS_BYTES_MS,
  ) {}

  /** Adds one ended exchange. */
  add(bytes: EgressBytes, now = new Date()): void {
    const key = `${bytes.protocol}://${bytes.host}:${bytes.port}`;
    const summary = this.#open.get(key) ?? {
      host: bytes.host,
      port: bytes.port,
      protocol: bytes.protocol,
      exchanges: 0,
      bytesOut: 0,
      bytesIn: 0,
      from: now.toISOString(),
    };
    summary.exchanges += 1;
    summary.bytesOut += bytes.bytesOut;
    summary.bytesIn += bytes.bytesIn;
    this.#open.set(key, summary);
    this.#timer ??= setTimeout(() => this.flush(), this.everyMs).unref();
  }

  /** Writes what was added up (one summary per destination) and starts anew. */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const open = [...this.#open.values()];
    this.#open.clear();
    for (const summary of open) this.write(summary);
  }
}
