// Secrets for the host's services (`network.hostPorts`). A host-port flow reaches the host as raw
// TCP, which Gondolin's HTTP handling never sees; so a host port that a secret is sent to is
// served instead by a small HTTP/1.1 forwarding proxy on the host's loopback, and the VM maps
// `host.sandbox.internal:<port>` to that proxy. The proxy applies the header rules of
// secret-rules.ts over plain HTTP (the one place they allow it): a listed secret's value goes in
// place of its placeholder in credential headers only (a Basic `Authorization` too, decoded and
// encoded again), and a request with a placeholder anywhere else in its head, or of a secret this
// port is not listed for, gets 403. It forwards to the host's `127.0.0.1:<port>` asking for an
// uncompressed answer, streams bodies both ways, and scrubs every answer (secret-scrubber.ts), the
// header values it filled in included: an answer in content or transfer codings is decoded
// first, by the same reading of the lists as the HTTPS way out (http-codings.ts: gzip, deflate,
// br; another coding gets 502), and a scrubbed body loses its `content-length`.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { pipeline } from "node:stream";
import { HOST_SERVICES_HOSTNAME, secretHostPorts } from "@pi-sandbox/config";
import { VmError, messageOf } from "../errors.js";
import { answerCodings, decoderFor, rawHeaderLines } from "./http-codings.js";
import {
  placeSecrets,
  substituteHeader,
  substitutionEchoes,
  type HeldSecret,
  type SecretStore,
} from "./secret-rules.js";
import {
  ScrubTransform,
  echoPatterns,
  mergePatterns,
  scrubText,
  type ScrubPattern,
  type ScrubbedSecret,
} from "./secret-scrubber.js";

/** Longest request head the proxy reads from the guest (Node's own default). */
export const MAX_GUEST_HEADER_BYTES = 16 * 1024;
/** Longest response head the proxy reads from the host service. */
const MAX_UPSTREAM_HEADER_BYTES = 64 * 1024;
/** A guest that opens a connection has this long to send a whole request head. */
const HEADERS_TIMEOUT_MS = 30_000;
/** Connections from the guest at once, per host port. */
const MAX_CONNECTIONS = 256;

// Hop-by-hop headers (RFC 9110 7.6.1): they describe one connection, and the proxy has two.
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "te",
  "trailer",
  "upgrade",
]);

/**
 * Node's raw header list (`[name, value, name, value, …]`) without hop-by-hop headers, substituted;
 * each value the host filled in is added to `echoes` (for `echoPatterns`).
 */
export function forwardedHeaders(
  raw: readonly string[],
  secrets: readonly HeldSecret[],
  echoes: ScrubbedSecret[] = [],
): string[] {
  const connectionTokens = new Set<string>();
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() === "connection") {
      for (const token of raw[i + 1]!.split(",")) connectionTokens.add(token.trim().toLowerCase());
    }
  }
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || connectionTokens.has(lower)) continue;
    const value = raw[i + 1]!;
    const sent = secrets.length > 0 ? substituteHeader(name, value, secrets) : value;
    if (sent !== value) echoes.push(...substitutionEchoes(value, sent));
    out.push(name, sent);
  }
  return out;
}

/** Host port → names of the secrets sent to it, for the host ports some secret is sent to. */
export function hostPortRoutes(
  hostPorts: readonly number[],
  secrets: Readonly<Record<string, { hosts: readonly string[] }>>,
): Map<number, string[]> {
  const routes = new Map<number, string[]>();
  for (const [name, secret] of Object.entries(secrets)) {
    for (const port of secretHostPorts(secret.hosts, hostPorts)) routes.set(port, [...(routes.get(port) ?? []), name]);
  }
  return routes;
}

/** Told of each secret put into a request: its name and where it went, never the value. */
export type SecretUse = (use: { secret: string; host: string }) => void;

/** One host port's proxy: where it listens, and the secrets it puts in. */
interface PortProxy {
  server: http.Server;
  agent: http.Agent;
  listenPort: number;
}

/**
 * The proxies of one VM, one per host port that a secret is sent to. `targets` maps each of those
 * host ports to its proxy's loopback port (for Gondolin's `tcp.hosts`); the other host ports are
 * not served here. Values come from the VM's `SecretStore`, so an update applies to the next request.
 */
export class HostPortProxies {
  private readonly proxies = new Map<number, PortProxy>();
  private closing: Promise<void> | undefined;

  private constructor(
    private readonly routes: ReadonlyMap<number, readonly string[]>,
    private readonly store: SecretStore,
    private readonly onUse: SecretUse | undefined,
  ) {}

  /**
   * Starts a proxy for each host port of `routes` (host port → names of the secrets sent there).
   * Undefined when no secret is sent to a host port. VM_START_FAILED if a proxy cannot listen.
   * `onUse` is told of each secret a request carries out (as the HTTPS way out tells it).
   */
  static async open(
    routes: ReadonlyMap<number, readonly string[]>,
    store: SecretStore,
    onUse?: SecretUse,
  ): Promise<HostPortProxies | undefined> {
    if (routes.size === 0) return undefined;
    for (const names of routes.values()) {
      for (const name of names) if (!store.get(name)) throw new Error(`host-port proxy: no secret named ${name}`);
    }
    const proxies = new HostPortProxies(routes, store, onUse);
    try {
      for (const port of routes.keys()) proxies.proxies.set(port, await proxies.listen(port));
    } catch (error) {
      await proxies.close();
      throw new VmError("VM_START_FAILED", `the HTTP proxy for the host ports could not listen: ${messageOf(error)}`, {
        cause: error,
        details: { hostPorts: [...routes.keys()] },
      });
    }
    return proxies;
  }

  /** Host port → the loopback port of its proxy. */
  targets(): Map<number, number> {
    return new Map([...this.proxies].map(([port, proxy]) => [port, proxy.listenPort]));
  }

  /** Stops listening and ends every connection. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      await Promise.all(
        [...this.proxies.values()].map(
          (proxy) =>
            new Promise<void>((resolve) => {
              proxy.server.close(() => resolve());
              proxy.server.closeAllConnections();
              proxy.agent.destroy();
            }),
        ),
      );
    })();
    return this.closing;
  }

  private async listen(port: number): Promise<PortProxy> {
    const agent = new http.Agent({ keepAlive: true, maxSockets: MAX_CONNECTIONS });
    const server = http.createServer(
      { maxHeaderSize: MAX_GUEST_HEADER_BYTES, requestTimeout: 0, headersTimeout: HEADERS_TIMEOUT_MS },
      (request, response) => this.forward(port, agent, request, response),
    );
    server.maxConnections = MAX_CONNECTIONS;
    // No protocol switch (WebSocket): the proxy speaks HTTP/1.1 only.
    server.on("upgrade", (_request, socket) => {
      socket.end("HTTP/1.1 501 Not Implemented\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
    });
    server.on("clientError", (error: NodeJS.ErrnoException, socket) => {
      if (!socket.writable) return socket.destroy();
      const status = error.code === "HPE_HEADER_OVERFLOW" ? "431 Request Header Fields Too Large" : "400 Bad Request";
      socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen({ host: "127.0.0.1", port: 0 }, () => {
        server.off("error", reject);
        resolve();
      });
    });
    return { server, agent, listenPort: (server.address() as AddressInfo).port };
  }

  /** The secrets this port's request carries in allowed places, or the reason it is refused. */
  private place(port: number, request: http.IncomingMessage): ReturnType<typeof placeSecrets> {
    const names = this.routes.get(port) ?? [];
    const headers: [string, string][] = [];
    for (let i = 0; i + 1 < request.rawHeaders.length; i += 2) {
      headers.push([request.rawHeaders[i]!, request.rawHeaders[i + 1]!]);
    }
    let url: string;
    try {
      url = new URL(request.url ?? "/", `http://host.sandbox.internal:${port}`).href;
    } catch {
      return { ok: false, reason: "the request target is not a URL" };
    }
    return placeSecrets({ url, headers }, this.store.all(), (secret) => names.includes(secret.name));
  }

  private forward(port: number, agent: http.Agent, request: http.IncomingMessage, response: http.ServerResponse): void {
    const fail = (status: number, why: string) => {
      if (response.headersSent) return void response.destroy();
      const text = `pi-sandbox: ${why}\n`;
      response.writeHead(status, {
        "content-type": "text/plain; charset=utf-8",
        "content-length": Buffer.byteLength(text),
      });
      response.end(text);
    };
    const placement = this.place(port, request);
    if (!placement.ok) {
      request.resume();
      return fail(403, `request refused: ${placement.reason}`);
    }
    let upstream: http.ClientRequest;
    const echoes: ScrubbedSecret[] = [];
    try {
      upstream = http.request({
        host: "127.0.0.1",
        port,
        method: request.method,
        path: request.url,
        headers: withoutAcceptEncoding(forwardedHeaders(request.rawHeaders, placement.carried, echoes)),
        agent,
        maxHeaderSize: MAX_UPSTREAM_HEADER_BYTES,
        setHost: false,
      });
    } catch (error) {
      // Node refuses a header it cannot send (never the value: messages name the header only).
      request.resume();
      return fail(400, `the request could not be forwarded (${(error as NodeJS.ErrnoException).code ?? "invalid"})`);
    }
    if (echoes.length > 0) {
      for (const secret of placement.carried)
        this.onUse?.({ secret: secret.name, host: `${HOST_SERVICES_HOSTNAME}:${port}` });
    }
    upstream.on("response", (answer) => this.answer(port, request.method ?? "GET", echoes, answer, response, fail));
    upstream.on("error", (error) => {
      fail(502, `host port ${port} did not answer (${(error as NodeJS.ErrnoException).code ?? "error"})`);
    });
    response.on("close", () => {
      if (!response.writableFinished) upstream.destroy();
    });
    // Not pipeline(): a failed upstream must not take the guest's connection before the 502.
    request.on("error", () => upstream.destroy());
    request.pipe(upstream);
  }

  /** Sends the host service's answer to the guest, decoded and scrubbed. */
  private answer(
    port: number,
    method: string,
    echoes: readonly ScrubbedSecret[],
    answer: http.IncomingMessage,
    response: http.ServerResponse,
    fail: (status: number, why: string) => void,
  ): void {
    const stored = this.store.patterns();
    const patterns = echoes.length > 0 ? mergePatterns(echoPatterns(echoes), stored) : stored;
    const status = answer.statusCode ?? 502;
    const hasBody = method.toUpperCase() !== "HEAD" && status !== 204 && status !== 304;
    const verdict = answerCodings(
      rawHeaderLines(answer.rawHeaders, "content-encoding"),
      rawHeaderLines(answer.rawHeaders, "transfer-encoding"),
    );
    if (hasBody && !verdict.ok) {
      answer.destroy();
      const why = `host port ${port} answered in a coding the host cannot check for secrets: ${verdict.reason}`;
      return fail(502, scrubText(why, patterns));
    }
    const decoders = hasBody && verdict.ok ? verdict.decodings.map(decoderFor) : [];
    try {
      const headers = scrubbedRawHeaders(forwardedHeaders(answer.rawHeaders, []), patterns, hasBody);
      response.writeHead(status, scrubText(answer.statusMessage ?? "", patterns), headers);
      response.flushHeaders();
    } catch (error) {
      answer.destroy();
      return fail(
        502,
        `host port ${port} answered what cannot be forwarded (${(error as NodeJS.ErrnoException).code ?? "invalid"})`,
      );
    }
    pipeline([answer, ...decoders, new ScrubTransform(patterns), response], () => undefined);
  }
}

/** Raw request headers without `accept-encoding`, then asking for an uncompressed answer. */
function withoutAcceptEncoding(raw: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() !== "accept-encoding") out.push(raw[i]!, raw[i + 1]!);
  }
  return [...out, "accept-encoding", "identity"];
}

/**
 * Response headers (raw list) scrubbed: values with every form of a value replaced, a header whose
 * name holds one dropped, no `transfer-encoding` (the body is decoded; Node frames it anew), and
 * with a body, no `content-length` or `content-encoding` (its length may change).
 */
export function scrubbedRawHeaders(
  raw: readonly string[],
  patterns: readonly ScrubPattern[],
  hasBody: boolean,
): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    const lower = name.toLowerCase();
    if (lower === "transfer-encoding") continue;
    if (hasBody && (lower === "content-length" || lower === "content-encoding")) continue;
    if (scrubText(name, patterns) !== name) continue;
    out.push(name, scrubText(raw[i + 1]!, patterns));
  }
  return out;
}
