// The guest side of one preview: connections with deadlines and pooling, and their typed failures.
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { Dispatcher, Pool } from "undici";
import { connectWithDeadline, type GuestConnector } from "./connector.js";
import { loadUndici } from "./undici-lib.js";

/** Timeouts and pooling of the guest side of one preview. */
export interface UpstreamOptions {
  /** Deadline to open a guest connection. */
  connectTimeoutMs: number;
  /** Deadline for the guest's response headers (dev servers may compile for a minute first). */
  headersTimeoutMs: number;
  /** Reuse guest connections between requests (HTTP keep-alive). */
  keepAlive: boolean;
  /** Most guest connections open at once for this preview; further requests queue. */
  maxConnections: number;
}

/** A connection attempt to the guest port failed; the request never reached the guest. */
export class GuestConnectError extends Error {
  /** Guest port we tried. */
  readonly guestPort: number;

  constructor(guestPort: number, cause: unknown) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    super(`cannot connect to guest port ${guestPort}: ${reason}`, { cause });
    this.name = "GuestConnectError";
    this.guestPort = guestPort;
  }
}

/**
 * The guest reset the connection. undici would take a reset during a close-delimited body as the
 * body's normal end (it tolerates macOS resets); we refuse to, so such a body fails visibly.
 */
export class GuestResetError extends Error {
  /** Stable code; deliberately not `ECONNRESET`, which undici special-cases. */
  readonly code = "EGUESTRESET";

  constructor(guestPort: number, cause: unknown) {
    super(`guest port ${guestPort} reset the connection`, { cause });
    this.name = "GuestResetError";
  }
}

/**
 * The undici pool that speaks HTTP/1.1 to one guest port. Its sockets are whatever the connector
 * returns (a virtio stream for a real VM), so undici's own TCP connector is never used. undici is
 * loaded when the first upstream is made (not awaited) and the pool on the first request.
 */
export class Upstream {
  /** Guest port served. */
  readonly guestPort: number;
  readonly #connector: GuestConnector;
  readonly #options: UpstreamOptions;
  readonly #closing = new AbortController();
  #pool: Promise<Pool> | undefined;
  /** How the upstream was ended before its pool existed: the pool then starts so ended. */
  #ended: "destroyed" | "drained" | undefined;

  constructor(guestPort: number, connector: GuestConnector, options: UpstreamOptions) {
    this.guestPort = guestPort;
    this.#connector = connector;
    this.#options = options;
    // Loaded while the preview waits for its first request, not on that request's path.
    loadUndici().catch(() => undefined);
  }

  /** Sends one request to the guest port (undici's `Pool.request`). */
  async request(options: Dispatcher.RequestOptions): Promise<Dispatcher.ResponseData> {
    return (await this.#thePool()).request(options);
  }

  /** Cancels connection attempts and destroys every guest connection (in-flight requests fail). */
  async destroy(): Promise<void> {
    this.#closing.abort(new Error("preview closed"));
    this.#ended = "destroyed";
    if (this.#pool) await (await this.#pool).destroy().catch(() => undefined);
  }

  /** Lets in-flight requests finish, then closes; used when a preview moves to another guest port. */
  async drain(): Promise<void> {
    this.#ended ??= "drained";
    if (this.#pool) await (await this.#pool).close().catch(() => undefined);
  }

  #thePool(): Promise<Pool> {
    this.#pool ??= loadUndici().then(({ Pool }) => {
      const { guestPort } = this;
      const options = this.#options;
      const connector = this.#connector;
      const closing = this.#closing.signal;
      const pool = new Pool(`http://127.0.0.1:${guestPort}`, {
        connections: options.maxConnections,
        pipelining: 1,
        headersTimeout: options.headersTimeoutMs,
        // SSE and long downloads may pause for minutes between chunks: no body timeout.
        bodyTimeout: 0,
        keepAliveTimeout: 4_000,
        connect: (_target, callback) => {
          connectWithDeadline(connector, guestPort, options.connectTimeoutMs, closing).then(
            // undici only uses the Duplex surface of what it calls a socket.
            (stream) => callback(null, withHonestResets(stream, guestPort) as Socket),
            (error: unknown) => callback(new GuestConnectError(guestPort, error), null),
          );
        },
      });
      // Ended before its first request: the request fails as it would on the ended pool.
      if (this.#ended === "destroyed") pool.destroy().catch(() => undefined);
      else if (this.#ended === "drained") pool.close().catch(() => undefined);
      return pool;
    });
    return this.#pool;
  }
}

// Re-labels a reset before undici sees it: for a body without explicit framing, a reset means the
// body may be incomplete, and the client must see a cut response rather than a clean end.
function withHonestResets(stream: Duplex, guestPort: number): Duplex {
  const emit = stream.emit;
  stream.emit = function (this: Duplex, event: string | symbol, ...args: unknown[]): boolean {
    if (event === "error" && (args[0] as NodeJS.ErrnoException | undefined)?.code === "ECONNRESET") {
      return emit.call(this, event, new GuestResetError(guestPort, args[0]));
    }
    return emit.call(this, event, ...args);
  } as Duplex["emit"];
  return stream;
}
