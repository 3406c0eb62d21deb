// Raw byte streams for large file transfers: the bytes of a read or write go down a TCP stream of
// their own (to a one-time loopback listener the agent opened for that transfer), not as base64
// in JSON chunks over the channel. The channel still opens, finishes and checks each transfer.
import type { Hash } from "node:crypto";
import type { Duplex } from "node:stream";
import type { AgentChannel } from "./channel.js";
import { protocolError } from "./channel.js";
import { SupervisorError } from "./errors.js";
import { BadReply, integer, record, text } from "./reply-checks.js";

/** Opens a TCP stream to a guest loopback port (the VM's `connectTcp`). */
export type GuestConnect = (port: number, signal: AbortSignal | undefined) => Promise<Duplex>;

/** Where a transfer's stream listens in the guest, and the one-time key the host sends first. */
export interface StreamDoor {
  port: number;
  key: string;
}

const STREAM_KEY = /^[0-9a-f]{32}$/;

/** How long the VM's connector gets to open a transfer's stream. */
export const STREAM_CONNECT_TIMEOUT_MS = 10_000;

/** Bytes the host hands the stream per write (the VM's connector cuts them into its own frames). */
const STREAM_PIECE_BYTES = 1024 * 1024;

/**
 * How long a stream may carry nothing before the transfer fails with AGENT_UNRESPONSIVE. The
 * agent gives up on a stalled stream after 120 s (streams.py) and says so on the channel first.
 */
export const STREAM_IDLE_MS = 150_000;

/**
 * The VM could not open the stream at all (a guest whose loopback is down, a connector that
 * refuses): no byte moved, and the caller may do the transfer over the channel instead.
 */
export class StreamUnreachable extends Error {
  constructor(cause: unknown) {
    super(
      `the guest's transfer stream could not be opened: ${cause instanceof Error ? cause.message : String(cause)}`,
      {
        cause,
      },
    );
    this.name = "StreamUnreachable";
  }
}

/** The `stream` field of an open's reply: a guest loopback port and a 32-hex-digit key. */
export function parseStreamDoor(raw: unknown, what: string): StreamDoor {
  const r = record(raw, what);
  const port = integer(r.port, `${what}.port`, 1, 65_535);
  const key = text(r.key, `${what}.key`, 64);
  if (!STREAM_KEY.test(key)) throw new BadReply(`${what}.key`, "is not a stream key");
  return { port, key };
}

/** The reason to give once a stream failed: the agent's own when its request failed too. */
async function reasonOf(error: unknown, answered: Promise<unknown>): Promise<unknown> {
  const agent = await Promise.race([answered, Promise.resolve(undefined)]);
  return agent ?? error;
}

/**
 * Runs `work` on a stream to `door` while the agent's `answer` to the stream request is pending:
 * the key goes first; abort, an agent failure or `idleMs` without progress destroy the stream.
 */
async function overStream<T>(
  connect: GuestConnect,
  door: StreamDoor,
  answer: Promise<T>,
  signal: AbortSignal | undefined,
  work: (socket: Duplex, progress: () => void) => Promise<void>,
): Promise<T> {
  let socket: Duplex | undefined;
  const failed = answer.then(
    () => undefined,
    (error: unknown) => {
      socket?.destroy();
      return error;
    },
  );
  let idle: NodeJS.Timeout | undefined;
  const onAbort = (): void => void socket?.destroy(signal?.reason as Error);
  try {
    socket = await connect(door.port, signal).catch((error: unknown) => {
      throw signal?.aborted ? signal.reason : new StreamUnreachable(error);
    });
    signal?.addEventListener("abort", onAbort, { once: true });
    const stalled = new SupervisorError(
      "AGENT_UNRESPONSIVE",
      `the guest's transfer stream carried nothing for ${STREAM_IDLE_MS / 1000} s; the guest may be overloaded`,
      { hint: "retry, or restart the instance if it persists", details: { idleMs: STREAM_IDLE_MS } },
    );
    const progress = (): void => {
      clearTimeout(idle);
      idle = setTimeout(() => socket?.destroy(stalled), STREAM_IDLE_MS);
      idle.unref?.();
    };
    progress();
    socket.write(`${door.key}\n`);
    await work(socket, progress);
  } catch (error) {
    socket?.destroy();
    if (signal?.aborted) throw signal.reason;
    if (error instanceof StreamUnreachable) throw error;
    throw await reasonOf(error, failed);
  } finally {
    clearTimeout(idle);
    signal?.removeEventListener("abort", onAbort);
  }
  try {
    return await answer;
  } finally {
    socket.destroy();
  }
}

/**
 * Takes exactly `length` bytes of an open read from its stream into `hash` and `write`. More than
 * `length` is a broken protocol (the channel closes); fewer means the file changed or the agent
 * failed, and nothing is kept.
 */
export async function receiveStream(
  channel: AgentChannel,
  connect: GuestConnect,
  read: { path: string; token: string; door: StreamDoor; length: number },
  hash: Hash,
  sink: { write(piece: Buffer): Promise<void> | void; onProgress?(done: number, total: number): void },
  signal: AbortSignal | undefined,
): Promise<void> {
  const { length } = read;
  const answer = channel.request(
    "file-read-stream",
    { token: read.token },
    (raw) => integer(record(raw, "result").sent, "result.sent", 0, length),
    { signal },
  );
  let received = 0;
  const sent = await overStream(connect, read.door, answer, signal, async (socket, progress) => {
    for await (const chunk of socket as AsyncIterable<Buffer>) {
      if (received + chunk.length > length) {
        const error = protocolError(`a transfer stream longer than the ${length} bytes announced`, { length });
        channel.fail(error);
        throw error;
      }
      progress();
      hash.update(chunk);
      await sink.write(chunk);
      received += chunk.length;
      sink.onProgress?.(received, length);
    }
  });
  if (sent !== length || received !== length) {
    throw new SupervisorError(
      "FILE_CHECKSUM_MISMATCH",
      `only ${received} of the ${length} bytes of ${read.path} arrived (it may have shrunk while it was read); nothing was kept`,
      { hint: "retry", details: { path: read.path, length, receivedBytes: received } },
    );
  }
}

/** Sends all `size` bytes of an open write down its stream, `read` piece by piece. */
export async function sendStream(
  channel: AgentChannel,
  connect: GuestConnect,
  write: { token: string; door: StreamDoor; size: number },
  source: {
    read(offset: number, length: number): Promise<Buffer> | Buffer;
    onProgress?(done: number, total: number): void;
  },
  signal: AbortSignal | undefined,
): Promise<void> {
  const { size } = write;
  const answer = channel.request(
    "file-write-stream",
    { token: write.token },
    (raw) => integer(record(raw, "result").written, "result.written", size, size),
    { signal },
  );
  await overStream(connect, write.door, answer, signal, async (socket, progress) => {
    // A stream the guest or an abort closed takes no more writes, and their callbacks may never come.
    const closed = new Promise<never>((_, reject) =>
      socket.once("close", () => reject(new Error("the transfer stream closed before all bytes were sent"))),
    );
    closed.catch(() => undefined);
    for (let offset = 0; offset < size; offset += STREAM_PIECE_BYTES) {
      const want = Math.min(STREAM_PIECE_BYTES, size - offset);
      const piece = await source.read(offset, want);
      if (piece.length !== want) throw new Error(`the source gave ${piece.length} bytes at ${offset}, not ${want}`);
      const written = new Promise<void>((resolve, reject) =>
        socket.write(piece, (error) => (error ? reject(error) : resolve())),
      );
      await Promise.race([written, closed]);
      progress();
      source.onProgress?.(offset + want, size);
    }
  });
}
