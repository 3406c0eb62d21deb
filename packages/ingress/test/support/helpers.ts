// Shared helpers of the ingress tests: host stand-ins for guest servers, a gateway over the loopback
// connector, raw HTTP requests and exchanges, a logger that keeps its lines, temporary directories.
import {
  createServer as createHttpServer,
  request as httpRequest,
  type IncomingMessage,
  type RequestListener,
  type Server,
} from "node:http";
import { createServer as createNetServer, Socket, type Server as NetServer } from "node:net";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Duplex } from "node:stream";
import { PreviewGateway, type PreviewGatewayOptions, type IngressLogger } from "../../src/index.js";
import { loopbackConnector } from "../../src/testing.js";

/** A host-local stand-in for a guest server; `close()` also cuts its open connections. */
export interface StandIn {
  port: number;
  close(): Promise<void>;
}

function closer(server: Server | NetServer): () => Promise<void> {
  const sockets = new Set<Socket>();
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  return () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      for (const socket of sockets) socket.destroy();
    });
}

/** An HTTP "guest" on 127.0.0.1 with Node's defaults (keep-alive, chunked when no length). */
export async function httpStandIn(handler: RequestListener, setup?: (server: Server) => void): Promise<StandIn> {
  const server = createHttpServer(handler);
  setup?.(server);
  const close = closer(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { port: (server.address() as { port: number }).port, close };
}

/** A raw TCP "guest" for hand-written HTTP. */
export async function rawStandIn(onConnection: (socket: Socket) => void): Promise<StandIn> {
  const server = createNetServer(onConnection);
  const close = closer(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { port: (server.address() as { port: number }).port, close };
}

/** A logger that remembers lines, for assertions on what users would read in the daemon log. */
export function memoryLogger(): IngressLogger & { lines: string[] } {
  const lines: string[] = [];
  return { lines, info: (m) => lines.push(`info ${m}`), warn: (m) => lines.push(`warn ${m}`) };
}

/** A gateway over the loopback connector. */
export function testGateway(options: Partial<PreviewGatewayOptions> & { plainDuplex?: boolean } = {}): PreviewGateway {
  const { plainDuplex, ...rest } = options;
  return new PreviewGateway({ connector: loopbackConnector({ plainDuplex }), ...rest });
}

/** Result of {@link fetchRaw}. */
export interface RawResponse {
  status: number;
  headers: IncomingMessage["headers"];
  body: Buffer;
}

/** A plain Node HTTP request with no connection reuse; rejects when the body is cut. */
export function fetchRaw(
  url: string,
  options: {
    method?: string;
    headers?: Record<string, string>;
    body?: Buffer | string;
    setHost?: boolean;
    /** Leave the response unread this long after its headers (a slow client). */
    readAfterMs?: number;
  } = {},
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, {
      method: options.method ?? "GET",
      headers: options.headers,
      agent: false,
      setHost: options.setHost,
    });
    req.on("error", reject);
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("error", reject);
      res.on("aborted", () => reject(new Error("response aborted")));
      res.on("end", () => {
        if (!res.complete) reject(new Error("response incomplete"));
        else resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) });
      });
      if (options.readAfterMs) {
        res.pause();
        setTimeout(() => res.resume(), options.readAfterMs);
      }
    });
    req.end(options.body);
  });
}

/** Sends raw bytes on a fresh TCP connection and collects everything until the server closes. */
export function rawExchange(port: number, text: string, timeoutMs = 5_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = new Socket();
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      resolve(Buffer.concat(chunks).toString("latin1"));
    }, timeoutMs);
    socket.on("data", (c: Buffer) => chunks.push(c));
    socket.on("error", (e: Error) => {
      clearTimeout(timer);
      reject(e);
    });
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString("latin1"));
    });
    socket.connect(port, "127.0.0.1", () => socket.write(text));
  });
}

/** Resolves when `stream` has closed, or rejects after `ms`. */
export function closedWithin(stream: Duplex | Socket, ms: number): Promise<void> {
  if (stream.destroyed && (stream as { closed?: boolean }).closed) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`still open after ${ms} ms`)), ms);
    stream.once("close", () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/** A private temp directory, removed by the returned function. */
export async function tempDir(): Promise<{ dir: string; remove: () => Promise<void> }> {
  const dir = await mkdtemp(path.join(tmpdir(), "ingress-test-"));
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}

/** Timestamp helper. */
export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
