// The short plain-text answers the gateway gives itself (guard refusals, upstream failures).
import type { ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { STATUS_CODES } from "node:http";

/** A short plain-text answer the gateway gives itself (guard refusals, upstream failures). */
export interface GatewayAnswer {
  /** HTTP status. */
  status: number;
  /** One or two sentences: what happened and what to do. */
  message: string;
}

/** Sends `answer` on a normal HTTP response and closes the connection afterwards. */
export function sendAnswer(res: ServerResponse, answer: GatewayAnswer): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = `${answer.message}\n`;
  res.writeHead(answer.status, {
    "content-type": "text/plain; charset=utf-8",
    "content-length": Buffer.byteLength(body),
    "cache-control": "no-store",
    "x-pi-sandbox-preview": "gateway",
    connection: "close",
  });
  res.end(body);
}

/** Writes `answer` as a raw HTTP/1.1 response on a socket taken over by an upgrade, then ends it. */
export function sendRawAnswer(socket: Duplex, answer: GatewayAnswer): void {
  if (socket.destroyed || !socket.writable) {
    socket.destroy();
    return;
  }
  const body = `${answer.message}\n`;
  const head = [
    `HTTP/1.1 ${answer.status} ${STATUS_CODES[answer.status] ?? ""}`,
    "content-type: text/plain; charset=utf-8",
    `content-length: ${Buffer.byteLength(body)}`,
    "cache-control: no-store",
    "x-pi-sandbox-preview: gateway",
    "connection: close",
  ].join("\r\n");
  socket.end(`${head}\r\n\r\n${body}`);
  // A client that never reads would keep the socket forever; give it a moment, then cut.
  setTimeout(() => socket.destroy(), 2_000).unref();
}
