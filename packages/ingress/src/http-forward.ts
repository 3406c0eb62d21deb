// Forwarding one HTTP request to the guest and its answer back, headers filtered both ways.
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import { PassThrough } from "node:stream";
import { pipeline } from "node:stream/promises";
import { sendAnswer, type GatewayAnswer } from "./pages.js";
import { isUndiciError } from "./undici-lib.js";
import { GuestConnectError, type Upstream } from "./upstream.js";

/** What the HTTP forwarder needs from its listener. */
export interface ForwardContext {
  /** Preview key, for messages. */
  readonly key: string;
  /** The pool for the preview's current guest port. */
  upstream(): Upstream;
  /** Reuse guest connections. */
  readonly keepAlive: boolean;
  /** Deadline for guest response headers, for the 504 message. */
  readonly headersTimeoutMs: number;
  /** Reports a failure that the client saw as an error response or a cut stream. */
  warn(message: string): void;
}

// Hop-by-hop headers (RFC 9110 §7.6.1) describe one connection and must not be forwarded.
// `expect` is answered by the host server itself; undici refuses to send it.
const hopByHop = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "expect",
  "http2-settings",
]);

const idempotent = new Set(["GET", "HEAD", "OPTIONS"]);

/** Forwards one plain HTTP request to the guest and streams the answer back. */
export async function forwardHttp(ctx: ForwardContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const cancel = new AbortController();
  // The client went away before we finished: stop the guest request too.
  res.once("close", () => {
    if (!res.writableFinished) cancel.abort(new Error("client disconnected"));
  });

  const hasBody = req.headers["transfer-encoding"] !== undefined || Number(req.headers["content-length"] ?? 0) > 0;
  const headers = requestHeaders(req);
  const method = req.method ?? "GET";
  const upstream = ctx.upstream();

  let response: Awaited<ReturnType<Upstream["request"]>> | undefined;
  let body: PassThrough | undefined;
  for (let attempt = 1; response === undefined; attempt++) {
    // The request body goes through a PassThrough we own: if undici gives up on it, the client's
    // IncomingMessage (and with it the socket we still answer on) is not destroyed.
    body = hasBody ? new PassThrough({ highWaterMark: 64 * 1024 }) : undefined;
    if (body) req.pipe(body);
    try {
      response = await upstream.request({
        method,
        path: req.url ?? "/",
        headers,
        body: body ?? null,
        signal: cancel.signal,
        reset: !ctx.keepAlive,
        bodyTimeout: 0,
      });
    } catch (error) {
      if (body) req.unpipe(body);
      if (cancel.signal.aborted) return;
      // A kept-alive guest connection may have been closed by the guest just as we reused it.
      // Retry once when nothing was sent that the guest could have acted on.
      if (attempt === 1 && ctx.keepAlive && !hasBody && idempotent.has(method) && isStaleSocket(error)) continue;
      const answer = upstreamFailureAnswer(ctx, upstream.guestPort, error, hasBody);
      ctx.warn(`${method} ${req.url}: ${answer.message}`);
      drainRequest(req);
      sendAnswer(res, answer);
      return;
    }
  }

  res.writeHead(response.statusCode, responseHeaders(response.headers));
  try {
    // pipeline destroys `res` when the guest stream fails: the client then sees a cut response
    // (missing final chunk or short content-length), never a silently truncated success.
    await pipeline(response.body, res);
  } catch (error) {
    if (!cancel.signal.aborted) {
      const closeDelimited =
        response.headers["content-length"] === undefined && response.headers["transfer-encoding"] === undefined;
      const advice = closeDelimited
        ? "; the response had no Content-Length or chunked framing, so its end could not be verified: make the server send explicit framing"
        : "";
      ctx.warn(
        `${method} ${req.url}: guest port ${upstream.guestPort} broke off the response body (${describe(error)}); the client connection was cut${advice}`,
      );
    }
    res.destroy();
  } finally {
    if (body) req.unpipe(body);
    drainRequest(req);
  }
}

/** Copies the client's headers minus hop-by-hop ones and those named in `Connection`. */
export function requestHeaders(req: IncomingMessage): string[] {
  const dropped = new Set(hopByHop);
  for (const token of connectionTokens(req.headers.connection)) dropped.add(token);
  dropped.add("host");
  const out: string[] = [];
  if (req.headers.host !== undefined) out.push("host", req.headers.host);
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    if (!dropped.has(name.toLowerCase())) out.push(name, raw[i + 1]!);
  }
  return out;
}

/** The guest's response headers minus hop-by-hop ones; Node re-frames the body for the client. */
export function responseHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const dropped = new Set(hopByHop);
  const connection = headers.connection;
  for (const token of connectionTokens(Array.isArray(connection) ? connection.join(",") : connection))
    dropped.add(token);
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !dropped.has(name)) out[name] = value;
  }
  return out;
}

function connectionTokens(value: string | undefined): string[] {
  if (value === undefined) return [];
  return value
    .split(",")
    .map((token) => token.trim().toLowerCase())
    .filter((token) => token !== "");
}

function isStaleSocket(error: unknown): boolean {
  return isUndiciError(error, "SocketError");
}

/** The gateway's own answer when the guest could not produce a response. */
export function upstreamFailureAnswer(
  ctx: ForwardContext,
  guestPort: number,
  error: unknown,
  hadBody = false,
): GatewayAnswer {
  const logs = `Check the logs of service ${ctx.key} (logs {service: "${ctx.key}"})`;
  if (error instanceof GuestConnectError) {
    return {
      status: 502,
      message: `Preview ${ctx.key}: nothing answers on guest port ${guestPort} (${describe(error.cause)}). Is the server running and listening on 127.0.0.1:${guestPort} in the guest? ${logs}.`,
    };
  }
  if (isUndiciError(error, "HeadersTimeoutError")) {
    return {
      status: 504,
      message: `Preview ${ctx.key}: guest port ${guestPort} sent no response headers within ${formatMs(ctx.headersTimeoutMs)}. ${logs}.`,
    };
  }
  if (hadBody && isBrokenPipe(error)) {
    return {
      status: 502,
      message: `Preview ${ctx.key}: guest port ${guestPort} closed the connection before reading the whole request body (the server may have refused the upload without reading it, e.g. as too large). ${logs}.`,
    };
  }
  if (isUndiciError(error, "SocketError") || isBrokenPipe(error)) {
    return {
      status: 502,
      message: `Preview ${ctx.key}: guest port ${guestPort} closed the connection before sending a response. ${logs}.`,
    };
  }
  if (isUndiciError(error, "HTTPParserError") || isUndiciError(error, "ResponseExceededMaxSizeError")) {
    return {
      status: 502,
      message: `Preview ${ctx.key}: guest port ${guestPort} sent an invalid HTTP/1.1 response (${describe(error)}). Previews forward plain HTTP only.`,
    };
  }
  return {
    status: 502,
    message: `Preview ${ctx.key}: the request to guest port ${guestPort} failed (${describe(error)}). ${logs}.`,
  };
}

function formatMs(ms: number): string {
  return ms >= 1000 && ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`;
}

function isBrokenPipe(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code === "EPIPE" || code === "ECONNRESET" || code === "EGUESTRESET";
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code && !error.message.includes(code) ? `${code}: ${error.message}` : error.message;
  }
  return String(error);
}

// Reads and discards what is left of an upload so the client can finish sending and read our
// answer instead of stalling on a full socket buffer.
function drainRequest(req: IncomingMessage): void {
  if (!req.complete && !req.destroyed) req.resume();
}
