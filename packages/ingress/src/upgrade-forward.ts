// Forwarding an upgraded connection (WebSocket) to the guest as raw bytes both ways.
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { connectWithDeadline, type GuestConnector } from "./connector.js";
import { sendRawAnswer } from "./pages.js";
import { upstreamFailureAnswer, type ForwardContext } from "./http-forward.js";
import { GuestConnectError } from "./upstream.js";

/** What the upgrade forwarder needs from its listener. */
export interface UpgradeContext extends ForwardContext {
  /** Opens guest streams. */
  readonly connector: GuestConnector;
  /** Guest port currently served. */
  guestPort(): number;
  /** Deadline to open a guest connection. */
  readonly connectTimeoutMs: number;
  /** Aborted when the listener closes. */
  readonly closing: AbortSignal;
  /** Registers a guest stream so closing the listener destroys it. */
  track(stream: Duplex): void;
}

/**
 * Forwards an upgrade (WebSocket) request: opens a guest stream, replays the request head, then
 * pipes bytes both ways. The guest's own 101 (or refusal) reaches the client unchanged, so
 * subprotocols and extensions negotiate end to end.
 */
export async function forwardUpgrade(
  ctx: UpgradeContext,
  req: IncomingMessage,
  client: Duplex,
  head: Buffer,
): Promise<void> {
  const port = ctx.guestPort();
  const cancel = new AbortController();
  const onClientGone = () => cancel.abort(new Error("client disconnected"));
  client.once("close", onClientGone);
  client.on("error", () => client.destroy());
  const onClosing = () => cancel.abort(ctx.closing.reason);
  ctx.closing.addEventListener("abort", onClosing, { once: true });

  let guest: Duplex;
  try {
    guest = await connectWithDeadline(ctx.connector, port, ctx.connectTimeoutMs, cancel.signal);
  } catch (error) {
    if (cancel.signal.aborted) {
      client.destroy();
      return;
    }
    const answer = upstreamFailureAnswer(ctx, port, new GuestConnectError(port, error));
    ctx.warn(`upgrade ${req.url}: ${answer.message}`);
    sendRawAnswer(client, answer);
    return;
  } finally {
    client.off("close", onClientGone);
    ctx.closing.removeEventListener("abort", onClosing);
  }
  ctx.track(guest);
  if (client.destroyed) {
    guest.destroy();
    return;
  }

  // A WebSocket has no use for a half-open tunnel: when the guest is done, flush what it sent,
  // then cut the client; when the client is gone, nobody reads the guest any more.
  const fail = () => {
    client.destroy();
    guest.destroy();
  };
  guest.on("error", fail);
  client.on("error", fail);
  guest.once("close", () => {
    if (client.destroyed) return;
    client.end();
    client.once("finish", () => client.destroy());
    setTimeout(() => client.destroy(), 2_000).unref();
  });
  client.once("close", () => guest.destroy());

  guest.write(requestHead(req));
  if (head.length > 0) guest.write(head);
  guest.pipe(client);
  client.pipe(guest);
}

/** The client's request line and headers, byte for byte in meaning, for replay to the guest. */
function requestHead(req: IncomingMessage): string {
  const lines = [`${req.method ?? "GET"} ${req.url ?? "/"} HTTP/1.1`];
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) lines.push(`${raw[i]}: ${raw[i + 1]}`);
  return `${lines.join("\r\n")}\r\n\r\n`;
}
