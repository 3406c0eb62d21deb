// Secrets for the host's services (`network.hostPorts`). A host-port flow reaches the host as raw
// TCP, which Gondolin's HTTP secret substitution never sees; so a host port that a secret is sent
// to is served instead by a small HTTP/1.1 forwarding proxy on the host's loopback, and the VM
// maps `host.sandbox.internal:<port>` to that proxy. The proxy puts each listed secret's value in
// place of its placeholder in the request headers (a Basic `Authorization` too, decoded and
// encoded again) and forwards the request to the host's `127.0.0.1:<port>`, streaming bodies both
// ways. Nothing else is changed; a request without a placeholder passes as it came.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { pipeline } from "node:stream";
import { secretHostPorts } from "@pi-sandbox/config";
import { VmError, messageOf } from "./errors.js";

/** A secret as the proxy of one host port uses it. */
export interface ProxiedSecret {
  /** What the guest sends. */
  placeholder: string;
  /** What the host service gets instead. */
  value: string;
}

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

const BASIC = /^(Basic)(\s+)(\S+)(\s*)$/i;
const CREDENTIAL_HEADER = /^(?:authorization|proxy-authorization)$/i;

/** `text` with every placeholder of `secrets` replaced by its value. */
function replaceAll(text: string, secrets: readonly ProxiedSecret[]): string {
  let out = text;
  for (const secret of secrets) {
    if (out.includes(secret.placeholder)) out = out.split(secret.placeholder).join(secret.value);
  }
  return out;
}

/**
 * One header value with the secrets' placeholders replaced by their values: anywhere in the text,
 * and inside a Basic credential (`Authorization`, `Proxy-Authorization`), as Gondolin does for
 * HTTP(S) egress. Unchanged (the same string) when it holds no placeholder.
 */
export function substituteHeader(name: string, value: string, secrets: readonly ProxiedSecret[]): string {
  let out = replaceAll(value, secrets);
  if (CREDENTIAL_HEADER.test(name)) {
    const basic = BASIC.exec(out);
    if (basic) {
      const decoded = Buffer.from(basic[3]!, "base64").toString("utf8");
      const replaced = replaceAll(decoded, secrets);
      if (replaced !== decoded) {
        out = `${basic[1]}${basic[2]}${Buffer.from(replaced, "utf8").toString("base64")}${basic[4]}`;
      }
    }
  }
  return out;
}

/** Node's raw header list (`[name, value, name, value, …]`) without hop-by-hop headers, substituted. */
export function forwardedHeaders(raw: readonly string[], secrets: readonly ProxiedSecret[]): string[] {
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
    out.push(name, secrets.length > 0 ? substituteHeader(name, raw[i + 1]!, secrets) : raw[i + 1]!);
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

/** One host port's proxy: where it listens, and the secrets it puts in. */
interface PortProxy {
  server: http.Server;
  agent: http.Agent;
  listenPort: number;
}

/**
 * The proxies of one VM, one per host port that a secret is sent to. `targets` maps each of those
 * host ports to its proxy's loopback port (for Gondolin's `tcp.hosts`); the other host ports are
 * not served here. `updateSecret` changes a value for every later request.
 */
export class HostPortProxies {
  private readonly proxies = new Map<number, PortProxy>();
  private readonly values = new Map<string, ProxiedSecret>();
  private closing: Promise<void> | undefined;

  private constructor(private readonly routes: ReadonlyMap<number, readonly string[]>) {}

  /**
   * Starts a proxy for each host port of `routes` (host port → names of the secrets sent there).
   * Undefined when no secret is sent to a host port. VM_START_FAILED if a proxy cannot listen.
   */
  static async open(
    routes: ReadonlyMap<number, readonly string[]>,
    secrets: Readonly<Record<string, ProxiedSecret>>,
  ): Promise<HostPortProxies | undefined> {
    if (routes.size === 0) return undefined;
    const proxies = new HostPortProxies(routes);
    for (const names of routes.values()) {
      for (const name of names) {
        const secret = secrets[name];
        if (!secret) throw new Error(`host-port proxy: no secret named ${name}`);
        proxies.values.set(name, { placeholder: secret.placeholder, value: secret.value });
      }
    }
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

  /** True when `name` is sent to a host port through these proxies. */
  has(name: string): boolean {
    return this.values.has(name);
  }

  /** Puts `value` in place of secret `name`'s placeholder from now on (no-op for another name). */
  updateSecret(name: string, value: string): void {
    const secret = this.values.get(name);
    if (secret) secret.value = value;
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

  private secretsFor(port: number): ProxiedSecret[] {
    return (this.routes.get(port) ?? []).map((name) => this.values.get(name)!);
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
    let upstream: http.ClientRequest;
    try {
      upstream = http.request({
        host: "127.0.0.1",
        port,
        method: request.method,
        path: request.url,
        headers: forwardedHeaders(request.rawHeaders, this.secretsFor(port)),
        agent,
        maxHeaderSize: MAX_UPSTREAM_HEADER_BYTES,
        setHost: false,
      });
    } catch (error) {
      // Node refuses a header it cannot send (never the value: messages name the header only).
      request.resume();
      return fail(400, `the request could not be forwarded (${(error as NodeJS.ErrnoException).code ?? "invalid"})`);
    }
    upstream.on("response", (answer) => {
      try {
        response.writeHead(answer.statusCode ?? 502, answer.statusMessage, forwardedHeaders(answer.rawHeaders, []));
        response.flushHeaders();
      } catch (error) {
        answer.destroy();
        return fail(
          502,
          `host port ${port} answered what cannot be forwarded (${(error as NodeJS.ErrnoException).code ?? "invalid"})`,
        );
      }
      pipeline(answer, response, () => undefined);
    });
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
}
