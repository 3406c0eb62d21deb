// What a gateway's previews are doing, for an owner that suspends an idle guest and keeps a record
// of the traffic: requests and WebSockets open now, a count of every one seen, and totals of
// requests, upgrades and bytes since the gateway opened. The owner keeps the clock; this only counts.
import type { Socket } from "node:net";

/** A snapshot of a gateway's traffic (see `PreviewGateway.activity`). */
export interface PreviewActivity {
  /** HTTP requests not yet answered and upgraded connections (WebSockets) still open, now. */
  open: number;
  /** HTTP requests and upgrades received since the gateway opened; compare two snapshots to see new ones. */
  seen: number;
  /** HTTP requests received since the gateway opened (past the Host and Origin guards). */
  requests: number;
  /** Upgrades (WebSocket opens) received since the gateway opened (past the guards). */
  upgrades: number;
  /**
   * Bytes read from preview clients' connections since the gateway opened, open ones included,
   * and those of refused requests (bytes are counted per connection, before any guard).
   */
  bytesIn: number;
  /** Bytes written to preview clients' connections since the gateway opened, counted as `bytesIn`. */
  bytesOut: number;
}

/** Counts the requests, upgrades and bytes of every listener of one gateway. */
export class ActivityMeter {
  #open = 0;
  #seen = 0;
  #requests = 0;
  #upgrades = 0;
  #closedIn = 0;
  #closedOut = 0;
  readonly #sockets = new Set<Socket>();

  /** Counts one request or upgrade as open from now; the returned function (idempotent) ends it. */
  begin(kind: "request" | "upgrade" = "request"): () => void {
    this.#open++;
    this.#seen++;
    if (kind === "request") this.#requests++;
    else this.#upgrades++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#open--;
      // Its end is news too: a request that began and ended between two snapshots was seen.
      this.#seen++;
    };
  }

  /** Counts a client connection's bytes, while it is open and after. */
  connection(socket: Socket): void {
    this.#sockets.add(socket);
    socket.once("close", () => {
      this.#sockets.delete(socket);
      this.#closedIn += socket.bytesRead;
      this.#closedOut += socket.bytesWritten;
    });
  }

  /** The counts now. */
  snapshot(): PreviewActivity {
    let bytesIn = this.#closedIn;
    let bytesOut = this.#closedOut;
    for (const socket of this.#sockets) {
      bytesIn += socket.bytesRead;
      bytesOut += socket.bytesWritten;
    }
    return {
      open: this.#open,
      seen: this.#seen,
      requests: this.#requests,
      upgrades: this.#upgrades,
      bytesIn,
      bytesOut,
    };
  }
}
