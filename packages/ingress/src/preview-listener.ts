// One preview's localhost listener: Host and Origin guards, then HTTP and upgrade forwarding.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { ActivityMeter } from "./activity.js";
import type { GuestConnector } from "./connector.js";
import { IngressError } from "./errors.js";
import { crossOriginRefusal, isAllowedHost, previewHostNames } from "./host-guard.js";
import { forwardHttp, type ForwardContext } from "./http-forward.js";
import type { IngressLogger } from "./logger.js";
import { sendAnswer, sendRawAnswer, type GatewayAnswer } from "./pages.js";
import { forwardUpgrade, type UpgradeContext } from "./upgrade-forward.js";
import { Upstream, type UpstreamOptions } from "./upstream.js";

/** Settings of one preview listener. */
export interface PreviewListenerOptions {
  /** Preview key. */
  key: string;
  /** Loopback address to bind (`127.0.0.1`, or the instance's own `127.x.y.z`). */
  address: string;
  /** Guest port to forward to; undefined for a reserved listener, which answers 503 until {@link PreviewListener.retarget}. */
  guestPort: number | undefined;
  /** Opens guest streams. */
  connector: GuestConnector;
  /** Guest-side timeouts and pooling. */
  upstream: UpstreamOptions;
  /** Refuse WebSocket upgrades and state-changing requests from pages outside this instance. */
  checkOrigin: boolean;
  /** Whether a host port belongs to an open preview of the same instance (this one's is always accepted; all share `address`). */
  isInstancePort: (port: number) => boolean;
  /** Upper bound for `close()`. */
  closeTimeoutMs: number;
  /** Log sink (lines already prefixed by the caller or not). */
  logger: IngressLogger;
  /** Counts this listener's requests and upgrades (shared by the gateway's listeners). */
  activity: ActivityMeter;
  /** The gateway's wake hook (see `PreviewGatewayOptions.wake`). */
  wake: (() => Promise<void> | undefined) | undefined;
}

/** Grace for a guest pool to finish in-flight requests when the preview moves to another guest port. */
const retargetGraceMs = 10_000;

/**
 * One `<address>:<hostPort>` HTTP server that forwards every request and upgrade to one guest port.
 * It tracks every client socket so `close()` can cut keep-alive clients, WebSockets and hung
 * uploads alike, instead of waiting for them.
 */
export class PreviewListener {
  /** Preview key. */
  readonly key: string;
  /** Bound host port. */
  readonly hostPort: number;
  /** Bound loopback address. */
  readonly address: string;
  readonly #server: Server;
  readonly #options: PreviewListenerOptions;
  readonly #sockets = new Set<Duplex>();
  readonly #closing = new AbortController();
  #upstream: Upstream | undefined;
  #closed: Promise<void> | undefined;

  private constructor(server: Server, hostPort: number, options: PreviewListenerOptions) {
    this.#server = server;
    this.hostPort = hostPort;
    this.address = options.address;
    this.key = options.key;
    this.#options = options;
    this.#upstream =
      options.guestPort === undefined
        ? undefined
        : new Upstream(options.guestPort, options.connector, options.upstream);
    server.on("connection", (socket: Socket) => {
      options.activity.connection(socket);
      this.track(socket);
    });
    server.on("request", (req: IncomingMessage, res: ServerResponse) => this.#onRequest(req, res));
    server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => this.#onUpgrade(req, socket, head));
  }

  /**
   * Binds `<options.address>:port` (0 = any free port). A taken port fails with
   * `INGRESS_PORT_IN_USE`; it never falls back to another port or address.
   */
  static async listen(port: number, options: PreviewListenerOptions, signal?: AbortSignal): Promise<PreviewListener> {
    signal?.throwIfAborted();
    const server = createServer({
      // Uploads and long polls may legitimately take long; stop() cuts whatever hangs.
      requestTimeout: 0,
      keepAliveTimeout: 5_000,
      noDelay: true,
    });
    try {
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen({ host: options.address, port, exclusive: true }, () => {
          server.off("error", reject);
          resolve();
        });
      });
    } catch (error) {
      server.close();
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "EADDRINUSE") {
        throw new IngressError(
          "INGRESS_PORT_IN_USE",
          `port ${port} for preview ${options.key} is taken by another process`,
          {
            hint: "stop that process or destroy and recreate the instance",
            cause: error,
            details: { key: options.key, port },
          },
        );
      }
      throw new IngressError(
        "INGRESS_LISTEN_FAILED",
        `cannot listen on ${options.address}:${port} for preview ${options.key}: ${(error as Error).message}`,
        {
          ...(code === "EADDRNOTAVAIL"
            ? { hint: `this host's loopback interface has no address ${options.address}; previews need it bound` }
            : {}),
          cause: error,
          details: { key: options.key, port, address: options.address },
        },
      );
    }
    const address = server.address();
    const bound = typeof address === "object" && address !== null ? address.port : port;
    const listener = new PreviewListener(server, bound, options);
    if (signal?.aborted) {
      await listener.close();
      throw signal.reason;
    }
    return listener;
  }

  /** `http://<address>:<hostPort>`. */
  get origin(): string {
    return `http://${this.address}:${this.hostPort}`;
  }

  /** Guest port requests currently go to; undefined while the listener is only reserved. */
  get guestPort(): number | undefined {
    return this.#upstream?.guestPort;
  }

  /** Number of open client connections (HTTP and upgraded). */
  get connectionCount(): number {
    return this.#sockets.size;
  }

  /** Sends new requests to `guestPort`; requests already running finish on the old port. */
  retarget(guestPort: number): void {
    if (guestPort === this.#upstream?.guestPort || this.#closed) return;
    const old = this.#upstream;
    this.#upstream = new Upstream(guestPort, this.#options.connector, this.#options.upstream);
    if (!old) return;
    const cut = setTimeout(() => void old.destroy(), retargetGraceMs);
    cut.unref();
    void old.drain().finally(() => clearTimeout(cut));
  }

  /** Stops accepting, cuts every client and guest connection; resolves within `closeTimeoutMs`. */
  close(): Promise<void> {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  /** Registers a stream to destroy on close (client sockets, guest streams of upgrades). */
  track(stream: Duplex): void {
    if (this.#closing.signal.aborted) {
      stream.destroy();
      return;
    }
    this.#sockets.add(stream);
    stream.once("close", () => this.#sockets.delete(stream));
  }

  async #close(): Promise<void> {
    this.#closing.abort(new IngressError("INGRESS_CLOSED", `preview ${this.key} was closed`));
    const serverClosed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    // Cut everything now rather than waiting for clients: a hung upload or an idle WebSocket
    // would otherwise keep the listener (and the daemon's stop) alive indefinitely.
    for (const stream of this.#sockets) stream.destroy();
    this.#sockets.clear();
    this.#server.closeAllConnections();
    const upstreamClosed = this.#upstream?.destroy();
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        this.#options.logger.warn(`close did not finish within ${this.#options.closeTimeoutMs} ms; giving up waiting`);
        resolve();
      }, this.#options.closeTimeoutMs);
    });
    await Promise.race([Promise.all([serverClosed, upstreamClosed]), deadline]);
    clearTimeout(timer);
  }

  #forwardContext(upstream: Upstream): ForwardContext {
    return {
      key: this.key,
      upstream: () => this.#upstream ?? upstream,
      keepAlive: this.#options.upstream.keepAlive,
      headersTimeoutMs: this.#options.upstream.headersTimeoutMs,
      warn: (message) => this.#options.logger.warn(message),
    };
  }

  #onRequest(req: IncomingMessage, res: ServerResponse): void {
    const refusal = this.#guard(req) ?? this.#originGuard(req, false);
    if (refusal) {
      this.#options.logger.warn(`refused ${req.method} ${req.url}: ${refusal.message}`);
      sendAnswer(res, refusal);
      return;
    }
    // Counted open before the wake hook is asked, in the same tick: an owner that checks for open
    // requests as it decides to suspend either sees this one or is asked to wake by it.
    const end = this.#options.activity.begin();
    res.once("close", end);
    const waking = this.#wake();
    if (!waking) {
      this.#forwardRequest(req, res);
      return;
    }
    waking.then(
      () => {
        // The client may have given up while the guest woke: nothing to forward then.
        if (this.#closing.signal.aborted || res.destroyed) res.destroy();
        else this.#forwardRequest(req, res);
      },
      (error: unknown) => {
        const answer = this.#wakeFailed(error);
        this.#options.logger.warn(`${req.method} ${req.url}: ${answer.message}`);
        sendAnswer(res, answer);
      },
    );
  }

  #forwardRequest(req: IncomingMessage, res: ServerResponse): void {
    if (!this.#upstream) {
      sendAnswer(res, this.#notYet());
      return;
    }
    forwardHttp(this.#forwardContext(this.#upstream), req, res).catch((error: unknown) => {
      this.#options.logger.warn(`${req.method} ${req.url}: ${(error as Error).message}`);
      res.destroy();
    });
  }

  #onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const refusal = this.#guard(req) ?? this.#originGuard(req, true);
    if (refusal) {
      this.#options.logger.warn(`refused upgrade ${req.url}: ${refusal.message}`);
      sendRawAnswer(socket, refusal);
      return;
    }
    // An open WebSocket is activity for as long as its client stays connected.
    socket.once("close", this.#options.activity.begin("upgrade"));
    const waking = this.#wake();
    if (!waking) {
      this.#forwardUpgrade(req, socket, head);
      return;
    }
    waking.then(
      () => {
        if (this.#closing.signal.aborted || socket.destroyed) socket.destroy();
        else this.#forwardUpgrade(req, socket, head);
      },
      (error: unknown) => {
        const answer = this.#wakeFailed(error);
        this.#options.logger.warn(`upgrade ${req.url}: ${answer.message}`);
        sendRawAnswer(socket, answer);
      },
    );
  }

  #forwardUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const upstream = this.#upstream;
    if (!upstream) {
      sendRawAnswer(socket, this.#notYet());
      return;
    }
    const ctx: UpgradeContext = {
      ...this.#forwardContext(upstream),
      connector: this.#options.connector,
      guestPort: () => (this.#upstream ?? upstream).guestPort,
      connectTimeoutMs: this.#options.upstream.connectTimeoutMs,
      closing: this.#closing.signal,
      track: (stream) => this.track(stream),
    };
    forwardUpgrade(ctx, req, socket, head).catch((error: unknown) => {
      this.#options.logger.warn(`upgrade ${req.url}: ${(error as Error).message}`);
      socket.destroy();
    });
  }

  /** The owner's wake hook, if it has one and it wants this request to wait. */
  #wake(): Promise<void> | undefined {
    try {
      return this.#options.wake?.();
    } catch (error) {
      return Promise.reject(error as Error);
    }
  }

  /** The answer when the owner could not wake the guest: nothing was forwarded. */
  #wakeFailed(error: unknown): GatewayAnswer {
    const reason = error instanceof Error ? error.message : String(error);
    return {
      status: 503,
      message: `Preview ${this.key} could not wake its instance: ${reason}. Reload to try again; if this stays, check the instance's state and its controller log.`,
    };
  }

  /** The answer of a reserved listener: its service is still starting, its guest port unknown. */
  #notYet(): GatewayAnswer {
    return {
      status: 503,
      message: `Preview ${this.key} is starting: its service has no guest port yet. Reload in a moment; if this stays, check the logs of service ${this.key}.`,
    };
  }

  #guard(req: IncomingMessage): GatewayAnswer | undefined {
    if (!isAllowedHost(req.headers.host, this.hostPort, this.address)) {
      const got = req.headers.host === undefined ? "no Host header" : `Host ${JSON.stringify(req.headers.host)}`;
      const names = [...previewHostNames(this.address)].map((name) => `${name}:${this.hostPort}`);
      return {
        status: 403,
        message: `Refused: ${got}. This preview only answers requests for ${names.join(" or ")} (protection against DNS rebinding). Open ${this.origin}/ instead.`,
      };
    }
    if (!req.url?.startsWith("/")) {
      return {
        status: 400,
        message: `Refused: request target ${JSON.stringify(req.url)} is not a path. A preview is an origin server, not a proxy.`,
      };
    }
    return undefined;
  }

  #originGuard(req: IncomingMessage, upgrade: boolean): GatewayAnswer | undefined {
    if (!this.#options.checkOrigin) return undefined;
    const fetchSite = req.headers["sec-fetch-site"];
    const refusal = crossOriginRefusal(
      {
        method: req.method ?? "GET",
        origin: req.headers.origin,
        fetchSite: Array.isArray(fetchSite) ? fetchSite.join(",") : fetchSite,
        upgrade,
      },
      ({ host, port }) =>
        previewHostNames(this.address).has(host) && (port === this.hostPort || this.#options.isInstancePort(port)),
    );
    if (refusal === undefined) return undefined;
    return {
      status: 403,
      message: `Refused: ${refusal}. This preview accepts WebSockets and state-changing requests only from its own pages and those of the other previews of the same instance (protection against cross-site request forgery and WebSocket hijacking).`,
    };
  }
}
