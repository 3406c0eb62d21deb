// The preview gateway of an instance: opens and closes previews, one listener and leased host port
// each, and counts their traffic for an owner that suspends an idle guest.
import { ActivityMeter, type PreviewActivity } from "./activity.js";
import { connectWithDeadline, type GuestConnector } from "./connector.js";
import { IngressError } from "./errors.js";
import { DEFAULT_PREVIEW_ADDRESS, isLoopbackV4 } from "./host-guard.js";
import { MemoryPortLeaseStore, type PortLeaseStore } from "./lease-store.js";
import { silentLogger, type IngressLogger } from "./logger.js";
import {
  resolveLinks,
  validatePreview,
  type PreviewInfo,
  type PreviewLink,
  type PreviewReservation,
  type PreviewSpec,
} from "./preview.js";
import type { PreviewListener } from "./preview-listener.js";
import { listenOnLease } from "./port-lease.js";

/** Options of a {@link PreviewGateway}. */
export interface PreviewGatewayOptions {
  /** Opens streams to guest ports (for a VM: `guestVmConnector(vm)`). */
  connector: GuestConnector;
  /** Where host ports are remembered; default in memory (ports then last as long as the gateway). */
  leases?: PortLeaseStore;
  /**
   * The loopback address every preview of this gateway binds, and the host of its origins: an
   * IPv4 address in 127.0.0.0/8. One address per instance gives each instance its own cookie jar
   * in browsers (they scope cookies by host, not port). Default `127.0.0.1`.
   */
  address?: string;
  /**
   * Host ports a new lease must not take, besides the leases of this gateway's other keys (for
   * example other instances' previews and the host ports their guests reach). Asked at each new
   * lease; default none.
   */
  avoidPorts?: () => Promise<Iterable<number>>;
  /** Log sink; lines are prefixed with `[preview <key>]`. Default: silent. */
  logger?: IngressLogger;
  /** Deadline for the guest's response headers. Default 180000 (dev servers may compile first). */
  headersTimeoutMs?: number;
  /** Deadline to open a guest connection. Default 10000. */
  connectTimeoutMs?: number;
  /** Reuse guest connections between requests. Default true. */
  upstreamKeepAlive?: boolean;
  /** Most simultaneous guest connections per preview; more requests queue. Default 256. */
  maxUpstreamConnections?: number;
  /**
   * Refuse WebSocket upgrades, and requests other than GET/HEAD/OPTIONS, sent by pages that are
   * not previews of this gateway (one gateway = one instance). Default true.
   */
  checkOrigin?: boolean;
  /** Upper bound of closing one preview, in ms. Default 5000. */
  closeTimeoutMs?: number;
  /**
   * Asked before each request or WebSocket upgrade (past the guards) is forwarded. Undefined: go
   * on at once. A promise: the request waits for it, then goes to the guest (an owner that
   * suspended an idle guest resumes it here, so the first request after is answered, not
   * refused); a rejection is answered with 503 and its message. Default: never wait.
   */
  wake?: () => Promise<void> | undefined;
}

interface OpenPreview {
  listener: PreviewListener;
  /** Undefined while the preview is only reserved (its guest port not known yet). */
  spec: PreviewSpec | undefined;
}

/**
 * The host side of previews: one listener on the gateway's loopback address per preview key, on a
 * host port leased once and kept. Operations on one key run one at a time; `closeAll()` is final.
 */
export class PreviewGateway implements AsyncDisposable {
  /** The loopback address the previews bind (`127.0.0.1` unless given). */
  readonly address: string;
  readonly #connector: GuestConnector;
  readonly #leases: PortLeaseStore;
  readonly #avoidPorts: () => Promise<Iterable<number>>;
  readonly #logger: IngressLogger;
  readonly #settings: {
    headersTimeoutMs: number;
    connectTimeoutMs: number;
    keepAlive: boolean;
    maxConnections: number;
    checkOrigin: boolean;
    closeTimeoutMs: number;
  };
  readonly #open = new Map<string, OpenPreview>();
  readonly #queues = new Map<string, Promise<unknown>>();
  readonly #closing = new AbortController();
  readonly #activity = new ActivityMeter();
  readonly #wake: (() => Promise<void> | undefined) | undefined;
  #closedAll: Promise<void> | undefined;

  /** Throws `INGRESS_INVALID_ADDRESS` when `options.address` is not an IPv4 address in 127.0.0.0/8. */
  constructor(options: PreviewGatewayOptions) {
    this.address = checkedAddress(options.address ?? DEFAULT_PREVIEW_ADDRESS);
    this.#connector = options.connector;
    this.#leases = options.leases ?? new MemoryPortLeaseStore();
    this.#avoidPorts = options.avoidPorts ?? (async () => []);
    this.#logger = options.logger ?? silentLogger;
    this.#settings = {
      headersTimeoutMs: options.headersTimeoutMs ?? 180_000,
      connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
      keepAlive: options.upstreamKeepAlive ?? true,
      maxConnections: options.maxUpstreamConnections ?? 256,
      checkOrigin: options.checkOrigin ?? true,
      closeTimeoutMs: options.closeTimeoutMs ?? 5_000,
    };
    this.#wake = options.wake;
  }

  /**
   * Opens the preview, or updates it when `spec.key` is already open: links are replaced and a
   * new `guestPort` takes effect for new requests, on the same origin. A reserved key
   * ({@link reserve}) is opened on its listener. The host port comes from the lease store; a new
   * key gets a free port, recorded before this resolves.
   */
  open(spec: PreviewSpec, options: { signal?: AbortSignal } = {}): Promise<PreviewInfo> {
    try {
      validatePreview(spec);
    } catch (error) {
      return Promise.reject(error);
    }
    const snapshot: PreviewSpec = { key: spec.key, guestPort: spec.guestPort, links: spec.links.map(copyLink) };
    return this.#serial(spec.key, () => this.#openNow(snapshot, options.signal));
  }

  /**
   * Holds the host port of `key` before its guest port is known: binds the leased (or a newly
   * leased) port and returns the origin, so a service can be started with its `PUBLIC_URL`. Until
   * {@link open} gives the guest port, the listener answers every request with a 503 "starting"
   * page, and the preview is not in {@link list} or {@link get}. Open or reserved already: returns
   * that origin and changes nothing. {@link close} gives a reservation up.
   */
  reserve(key: string, options: { signal?: AbortSignal } = {}): Promise<PreviewReservation> {
    try {
      // Only the key is in question here: any valid port and no links pass the rest.
      validatePreview({ key, guestPort: 1, links: [] });
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#serial(key, () => this.#reserveNow(key, options.signal));
  }

  /** Whether `key` is open or reserved. */
  has(key: string): boolean {
    return this.#open.has(key);
  }

  /**
   * The traffic of every preview now: requests and WebSockets open, and how many were seen so
   * far. Counting starts past the Host and Origin guards: a refused request is no activity.
   */
  activity(): PreviewActivity {
    return this.#activity.snapshot();
  }

  /** How many previews are open or reserved (each holds a host listener). */
  get size(): number {
    return this.#open.size;
  }

  /** Closes the preview's listener and cuts its clients; its port lease is kept. No-op when not open. */
  close(key: string): Promise<void> {
    return this.#serial(key, () => this.#closeNow(key), { allowClosed: true });
  }

  /** Closes the preview and forgets its port lease (for a preview that is gone for good). */
  release(key: string): Promise<void> {
    return this.#serial(
      key,
      async () => {
        await this.#closeNow(key);
        await this.#leases.delete(key);
      },
      { allowClosed: true },
    );
  }

  /** Every open preview, in opening order (reserved ones not included). */
  list(): PreviewInfo[] {
    return [...this.#open.values()].flatMap(({ listener, spec }) => (spec ? [info(listener, spec)] : []));
  }

  /** The open preview `key`, or undefined (also while it is only reserved). */
  get(key: string): PreviewInfo | undefined {
    const entry = this.#open.get(key);
    return entry?.spec && info(entry.listener, entry.spec);
  }

  /** `http://<address>:<hostPort>` of an open or reserved preview (its `PUBLIC_URL`); throws `INGRESS_NOT_OPEN` otherwise. */
  origin(key: string): string {
    const entry = this.#open.get(key);
    if (!entry) {
      throw new IngressError("INGRESS_NOT_OPEN", `preview ${key} is not open`, {
        hint: "open it first",
        details: { key },
      });
    }
    return entry.listener.origin;
  }

  /**
   * Checks that something accepts connections on the preview's guest port (one connection through
   * the connector, closed at once). Throws `INGRESS_UPSTREAM_FAILED` with the advice of the 502
   * page, or `INGRESS_NOT_OPEN`.
   */
  async probe(key: string, options: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<void> {
    const entry = this.#open.get(key);
    const guestPort = entry?.listener.guestPort;
    if (guestPort === undefined) {
      throw new IngressError("INGRESS_NOT_OPEN", `preview ${key} is not open`, {
        hint: "open it first",
        details: { key },
      });
    }
    const signal = options.signal ? AbortSignal.any([options.signal, this.#closing.signal]) : this.#closing.signal;
    try {
      const stream = await connectWithDeadline(
        this.#connector,
        guestPort,
        options.timeoutMs ?? this.#settings.connectTimeoutMs,
        signal,
      );
      stream.destroy();
    } catch (error) {
      if (options.signal?.aborted) throw options.signal.reason;
      if (this.#closing.signal.aborted) throw closedError();
      const reason = error instanceof Error ? error.message : String(error);
      throw new IngressError(
        "INGRESS_UPSTREAM_FAILED",
        `preview ${key}: nothing answers on guest port ${guestPort} (${reason})`,
        {
          hint: `is the server running and listening on 127.0.0.1:${guestPort} in the guest? Check the logs of service ${key}`,
          cause: error,
          details: { key, guestPort },
        },
      );
    }
  }

  /** Cancels pending opens, closes every preview and cuts every client. Idempotent; final. */
  closeAll(): Promise<void> {
    this.#closedAll ??= this.#closeAllNow();
    return this.#closedAll;
  }

  /** Same as {@link closeAll}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.closeAll();
  }

  async #openNow(spec: PreviewSpec, signal: AbortSignal | undefined): Promise<PreviewInfo> {
    const combined = signal ? AbortSignal.any([signal, this.#closing.signal]) : this.#closing.signal;
    const cancelled = () => (signal?.aborted ? signal.reason : closedError());
    if (combined.aborted) throw cancelled();

    const existing = this.#open.get(spec.key);
    if (existing) {
      const reserved = existing.spec === undefined;
      existing.spec = spec;
      existing.listener.retarget(spec.guestPort);
      if (reserved) this.#log(spec.key).info(`open ${existing.listener.origin} -> guest port ${spec.guestPort}`);
      return info(existing.listener, spec);
    }

    const listener = await this.#bind(spec.key, spec.guestPort, combined).catch((error: unknown) => {
      throw combined.aborted ? cancelled() : error;
    });
    if (combined.aborted) {
      await listener.close();
      throw cancelled();
    }
    this.#open.set(spec.key, { listener, spec });
    this.#log(spec.key).info(`open ${listener.origin} -> guest port ${spec.guestPort}`);
    return info(listener, spec);
  }

  async #reserveNow(key: string, signal: AbortSignal | undefined): Promise<PreviewReservation> {
    const combined = signal ? AbortSignal.any([signal, this.#closing.signal]) : this.#closing.signal;
    const cancelled = () => (signal?.aborted ? signal.reason : closedError());
    if (combined.aborted) throw cancelled();
    const existing = this.#open.get(key);
    if (existing) return reservation(key, existing.listener);
    const listener = await this.#bind(key, undefined, combined).catch((error: unknown) => {
      throw combined.aborted ? cancelled() : error;
    });
    if (combined.aborted) {
      await listener.close();
      throw cancelled();
    }
    this.#open.set(key, { listener, spec: undefined });
    this.#log(key).info(`reserved ${listener.origin}; the guest port follows`);
    return reservation(key, listener);
  }

  async #bind(key: string, guestPort: number | undefined, signal: AbortSignal): Promise<PreviewListener> {
    const options = {
      key,
      address: this.address,
      guestPort,
      connector: this.#connector,
      upstream: {
        connectTimeoutMs: this.#settings.connectTimeoutMs,
        headersTimeoutMs: this.#settings.headersTimeoutMs,
        keepAlive: this.#settings.keepAlive,
        maxConnections: this.#settings.maxConnections,
      },
      checkOrigin: this.#settings.checkOrigin,
      // Only previews held right now (open or reserved): a closed preview's port may be bound by
      // anything else.
      isInstancePort: (port: number) => [...this.#open.values()].some(({ listener }) => listener.hostPort === port),
      closeTimeoutMs: this.#settings.closeTimeoutMs,
      logger: this.#log(key),
      activity: this.#activity,
      wake: this.#wake,
    };
    return listenOnLease(key, this.#leases, this.#avoidPorts, options, signal);
  }

  async #closeNow(key: string): Promise<void> {
    const entry = this.#open.get(key);
    if (!entry) return;
    this.#open.delete(key);
    await entry.listener.close();
    this.#log(key).info(`closed ${entry.listener.origin}`);
  }

  async #closeAllNow(): Promise<void> {
    this.#closing.abort(closedError());
    // Wait for operations already running on each key (opens see the abort and undo themselves),
    // but not forever: a lease store that hangs must not keep stop from cutting clients.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.#queues.values()]),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, this.#settings.closeTimeoutMs))),
    ]);
    clearTimeout(timer);
    await Promise.allSettled([...this.#open.keys()].map((key) => this.#closeNow(key)));
  }

  #serial<T>(key: string, task: () => Promise<T>, options: { allowClosed?: boolean } = {}): Promise<T> {
    if (!options.allowClosed && this.#closing.signal.aborted) return Promise.reject(closedError());
    const previous = this.#queues.get(key) ?? Promise.resolve();
    const run = previous.then(task, task);
    const settled = run.catch(() => undefined);
    this.#queues.set(key, settled);
    void settled.then(() => {
      if (this.#queues.get(key) === settled) this.#queues.delete(key);
    });
    return run;
  }

  #log(key: string): IngressLogger {
    return {
      info: (message) => this.#logger.info(`[preview ${key}] ${message}`),
      warn: (message) => this.#logger.warn(`[preview ${key}] ${message}`),
    };
  }
}

function info(listener: PreviewListener, spec: PreviewSpec): PreviewInfo {
  return {
    key: spec.key,
    guestPort: listener.guestPort ?? spec.guestPort,
    hostPort: listener.hostPort,
    origin: listener.origin,
    links: resolveLinks(spec.links, listener.origin),
  };
}

function reservation(key: string, listener: PreviewListener): PreviewReservation {
  return { key, hostPort: listener.hostPort, origin: listener.origin };
}

function copyLink(link: PreviewLink): PreviewLink {
  const copy: PreviewLink = { url: link.url, title: link.title };
  if (link.description !== undefined) copy.description = link.description;
  if (link.folder !== undefined) copy.folder = link.folder;
  return copy;
}

function checkedAddress(address: string): string {
  if (isLoopbackV4(address)) return address;
  throw new IngressError(
    "INGRESS_INVALID_ADDRESS",
    `previews cannot bind ${JSON.stringify(address)}: not an IPv4 loopback address`,
    { hint: "give an address in 127.0.0.0/8 such as 127.0.0.1", details: { address } },
  );
}

function closedError(): IngressError {
  return new IngressError("INGRESS_CLOSED", "the preview gateway is closed; previews can no longer be opened", {});
}
