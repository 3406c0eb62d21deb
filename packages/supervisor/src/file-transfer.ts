// Chunked file reads and writes through the agent, each checked against its sha256.
import { createHash } from "node:crypto";
import type { AgentChannel } from "./channel.js";
import { SupervisorError } from "./errors.js";
import { TRANSFER_CHUNK_BYTES } from "./protocol.js";
import { BadReply, base64Bytes, integer, readExtent, record, text } from "./reply-checks.js";
import type { WriteResult } from "./types.js";
import { REPLY_MARGIN_MS } from "./options.js";
import { parseStreamDoor, receiveStream, sendStream, type GuestConnect, type StreamDoor } from "./transfer-stream.js";

const SHA256 = /^[0-9a-f]{64}$/;
const TOKEN = /^[A-Za-z0-9_-]{1,64}$/;

function sha256(data: Buffer): string {
  return createHash("sha256").update(data).digest("hex");
}

interface ReadOpen {
  size: number;
  length: number;
  sha256: string;
  truncated: boolean;
  data?: Buffer;
  token?: string;
  door?: StreamDoor;
}

function token(value: unknown, what: string): string {
  const t = text(value, what, 64);
  if (!TOKEN.test(t)) throw new BadReply(what, "is not a transfer token");
  return t;
}

/**
 * A read's opening reply: at most `maxBytes`, inline up to one chunk, else a token for chunks, and
 * with `stream` asked for, its stream's door.
 */
function parseReadOpen(raw: unknown, maxBytes: number, stream: boolean): ReadOpen {
  const r = record(raw, "result");
  const { size, length, truncated } = readExtent(r, maxBytes);
  const sum = text(r.sha256, "result.sha256", 64);
  if (!SHA256.test(sum)) throw new BadReply("result.sha256", "is not a sha256");
  if (length <= TRANSFER_CHUNK_BYTES) {
    return { size, length, sha256: sum, truncated, data: base64Bytes(r.data, "result.data", length) };
  }
  integer(r.chunkBytes, "result.chunkBytes", TRANSFER_CHUNK_BYTES, TRANSFER_CHUNK_BYTES);
  const opened = { size, length, sha256: sum, truncated, token: token(r.token, "result.token") };
  return stream ? { ...opened, door: parseStreamDoor(r.stream, "result.stream") } : opened;
}

/** One chunk of a read: exactly the bytes asked for, at the offset asked for. */
function parseReadChunk(raw: unknown, offset: number, bytes: number): Buffer {
  const r = record(raw, "result");
  integer(r.offset, "result.offset", offset, offset);
  return base64Bytes(r.data, "result.data", bytes);
}

/** A completed write: the path, size and sha256 the host sent. */
function parseWritten(raw: unknown, path: string, size: number, sum: string): WriteResult {
  const r = record(raw, "result");
  if (text(r.path, "result.path") !== path) throw new BadReply("result.path", "is not the path written");
  integer(r.size, "result.size", size, size);
  if (r.sha256 !== sum) throw new BadReply("result.sha256", "is not the sha256 of the data sent");
  return { path, sizeBytes: size, sha256: sum };
}

/** What a read passes each piece of the file to, in order; and its progress. */
export interface ReadSink {
  /** Takes the next piece (a chunk exactly as asked for). */
  write(piece: Buffer): Promise<void> | void;
  /** Bytes received so far of `total`, after each piece. */
  onProgress?(done: number, total: number): void;
}

/**
 * Reads up to `maxBytes` of a guest file in chunks, passing each to `sink`, and checks the sha256
 * the agent computed over all of them. The agent's length, chunks and flags are checked against
 * what was asked: it can never make the host receive more than `maxBytes` of file data. On a
 * checksum mismatch the sink has had all the data: the caller discards it. With `connect`, a read
 * larger than one chunk comes raw down a stream of its own (transfer-stream.ts).
 */
export async function readThroughAgentTo(
  channel: AgentChannel,
  path: string,
  maxBytes: number,
  exact: boolean,
  sink: ReadSink,
  signal: AbortSignal | undefined,
  connect?: GuestConnect,
): Promise<{ size: number; length: number; sha256: string; truncated: boolean }> {
  const stream = connect !== undefined && maxBytes > TRANSFER_CHUNK_BYTES;
  const opened = await channel.request(
    "file-read-open",
    { path, maxBytes, exact, ...(stream ? { stream: true } : {}) },
    (raw) => parseReadOpen(raw, maxBytes, stream),
    { signal, timeoutMs: REPLY_MARGIN_MS },
  );
  const hash = createHash("sha256");
  if (opened.data !== undefined) {
    hash.update(opened.data);
    await sink.write(opened.data);
    sink.onProgress?.(opened.length, opened.length);
  } else {
    let received = 0;
    try {
      if (opened.door && connect) {
        const read = { path, token: opened.token!, door: opened.door, length: opened.length };
        await receiveStream(channel, connect, read, hash, sink, signal);
        received = opened.length;
      }
      while (received < opened.length) {
        const offset = received;
        const bytes = Math.min(TRANSFER_CHUNK_BYTES, opened.length - offset);
        const piece = await channel.request(
          "file-read-chunk",
          { token: opened.token, offset },
          (raw) => parseReadChunk(raw, offset, bytes),
          { signal, timeoutMs: REPLY_MARGIN_MS },
        );
        hash.update(piece);
        await sink.write(piece);
        received += piece.length;
        sink.onProgress?.(received, opened.length);
      }
    } finally {
      // Frees the agent's open file; best effort, the agent also drops idle transfers.
      void channel.request("file-read-close", { token: opened.token }, () => undefined).catch(() => undefined);
    }
  }
  if (hash.digest("hex") !== opened.sha256) {
    throw new SupervisorError(
      "FILE_CHECKSUM_MISMATCH",
      `the content of ${path} arrived damaged or changed while it was read (sha256 mismatch); nothing was kept`,
      { hint: "retry", details: { path, expected: opened.sha256, receivedBytes: opened.length } },
    );
  }
  return { size: opened.size, length: opened.length, sha256: opened.sha256, truncated: opened.truncated };
}

/** Reads up to `maxBytes` of a guest file into memory; see {@link readThroughAgentTo}. */
export async function readThroughAgent(
  channel: AgentChannel,
  path: string,
  maxBytes: number,
  exact: boolean,
  signal: AbortSignal | undefined,
): Promise<{ data: Buffer; size: number; truncated: boolean }> {
  const parts: Buffer[] = [];
  const read = await readThroughAgentTo(
    channel,
    path,
    maxBytes,
    exact,
    { write: (piece) => void parts.push(piece) },
    signal,
  );
  return { data: Buffer.concat(parts), size: read.size, truncated: read.truncated };
}

/** Where a write's bytes come from: their size and sha256 up front, then pieces by offset. */
export interface WriteSource {
  /** Total bytes. */
  size: number;
  /** sha256 of all of them, hex. */
  sha256: string;
  /** The `length` bytes at `offset` (exactly that many). */
  read(offset: number, length: number): Promise<Buffer> | Buffer;
  /** Bytes sent so far of `size`, after each piece. */
  onProgress?(done: number, total: number): void;
}

/** A source over bytes in memory. */
export function bufferSource(data: Buffer): WriteSource {
  return {
    size: data.length,
    sha256: sha256(data),
    read: (offset, length) => data.subarray(offset, offset + length),
  };
}

/**
 * Writes a guest file atomically through the agent: chunks (or with `connect`, a stream of its
 * own), then a sha256-checked commit.
 */
export async function writeThroughAgent(
  channel: AgentChannel,
  path: string,
  input: Buffer | WriteSource,
  options: { mode?: number; createParents?: boolean; signal?: AbortSignal },
  connect?: GuestConnect,
): Promise<WriteResult> {
  const { signal } = options;
  const source = Buffer.isBuffer(input) ? bufferSource(input) : input;
  const size = source.size;
  const sum = source.sha256;
  const base = {
    path,
    size,
    sha256: sum,
    ...(options.mode === undefined ? {} : { mode: options.mode }),
    ...(options.createParents ? { createParents: true } : {}),
  };
  const written = (raw: unknown) => parseWritten(raw, path, size, sum);
  if (size <= TRANSFER_CHUNK_BYTES) {
    const data = await source.read(0, size);
    const done = await channel.request("file-write-open", { ...base, data: data.toString("base64") }, written, {
      signal,
      timeoutMs: REPLY_MARGIN_MS,
    });
    source.onProgress?.(size, size);
    return done;
  }
  const { token: opened, door } = await channel.request(
    "file-write-open",
    connect ? { ...base, stream: true } : base,
    (raw) => {
      const r = record(raw, "result");
      integer(r.chunkBytes, "result.chunkBytes", TRANSFER_CHUNK_BYTES, TRANSFER_CHUNK_BYTES);
      return { token: token(r.token, "result.token"), door: connect && parseStreamDoor(r.stream, "result.stream") };
    },
    { signal, timeoutMs: REPLY_MARGIN_MS },
  );
  let committed = false;
  try {
    if (door && connect) await sendStream(channel, connect, { token: opened, door, size }, source, signal);
    for (let offset = door ? size : 0; offset < size; offset += TRANSFER_CHUNK_BYTES) {
      const want = Math.min(TRANSFER_CHUNK_BYTES, size - offset);
      const piece = await source.read(offset, want);
      if (piece.length !== want) throw new Error(`the source gave ${piece.length} bytes at ${offset}, not ${want}`);
      const end = offset + piece.length;
      await channel.request(
        "file-write-chunk",
        { token: opened, offset, data: piece.toString("base64") },
        (raw) => integer(record(raw, "result").written, "result.written", end, end),
        { signal, timeoutMs: REPLY_MARGIN_MS },
      );
      source.onProgress?.(end, size);
    }
    const done = await channel.request("file-write-commit", { token: opened }, written, {
      signal,
      timeoutMs: REPLY_MARGIN_MS,
    });
    committed = true;
    return done;
  } finally {
    if (!committed) {
      void channel.request("file-write-abort", { token: opened }, () => undefined).catch(() => undefined);
    }
  }
}
