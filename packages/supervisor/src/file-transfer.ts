import { createHash } from "node:crypto";
import type { AgentChannel } from "./channel.js";
import { SupervisorError } from "./errors.js";
import { TRANSFER_CHUNK_BYTES } from "./protocol.js";
import { BadReply, base64Bytes, boolean, integer, record, text } from "./reply-checks.js";
import type { WriteResult } from "./types.js";

const REPLY_MARGIN_MS = 60_000;
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
}

function token(value: unknown, what: string): string {
  const t = text(value, what, 64);
  if (!TOKEN.test(t)) throw new BadReply(what, "is not a transfer token");
  return t;
}

/** A read's opening reply: at most `maxBytes`, inline up to one chunk, else a token for chunks. */
function parseReadOpen(raw: unknown, maxBytes: number): ReadOpen {
  const r = record(raw, "result");
  const length = integer(r.length, "result.length", 0, maxBytes);
  const size = integer(r.size, "result.size", length);
  const truncated = boolean(r.truncated, "result.truncated");
  if (truncated !== size > length)
    throw new BadReply("result.truncated", `is ${truncated} for ${length} of ${size} bytes`);
  const sum = text(r.sha256, "result.sha256", 64);
  if (!SHA256.test(sum)) throw new BadReply("result.sha256", "is not a sha256");
  if (length <= TRANSFER_CHUNK_BYTES) {
    return { size, length, sha256: sum, truncated, data: base64Bytes(r.data, "result.data", length) };
  }
  integer(r.chunkBytes, "result.chunkBytes", TRANSFER_CHUNK_BYTES, TRANSFER_CHUNK_BYTES);
  return { size, length, sha256: sum, truncated, token: token(r.token, "result.token") };
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

/**
 * Reads up to `maxBytes` of a guest file in chunks and checks the sha256 the agent computed. The
 * agent's length, chunks and flags are checked against what was asked: it can never make the host
 * hold more than `maxBytes` of file data.
 */
export async function readThroughAgent(
  channel: AgentChannel,
  path: string,
  maxBytes: number,
  exact: boolean,
  signal: AbortSignal | undefined,
): Promise<{ data: Buffer; size: number; truncated: boolean }> {
  const opened = await channel.request(
    "file-read-open",
    { path, maxBytes, exact },
    (raw) => parseReadOpen(raw, maxBytes),
    { signal, timeoutMs: REPLY_MARGIN_MS },
  );
  let data: Buffer;
  if (opened.data !== undefined) {
    data = opened.data;
  } else {
    const parts: Buffer[] = [];
    let received = 0;
    try {
      while (received < opened.length) {
        const offset = received;
        const bytes = Math.min(TRANSFER_CHUNK_BYTES, opened.length - offset);
        const piece = await channel.request(
          "file-read-chunk",
          { token: opened.token, offset },
          (raw) => parseReadChunk(raw, offset, bytes),
          { signal, timeoutMs: REPLY_MARGIN_MS },
        );
        parts.push(piece);
        received += piece.length;
      }
    } finally {
      // Frees the agent's copy; best effort, the agent also drops idle transfers.
      void channel.request("file-read-close", { token: opened.token }, () => undefined).catch(() => undefined);
    }
    data = Buffer.concat(parts);
  }
  if (sha256(data) !== opened.sha256) {
    throw new SupervisorError(
      "FILE_CHECKSUM_MISMATCH",
      `the content of ${path} arrived damaged (sha256 mismatch); nothing was returned — retry the read`,
      { details: { path, expected: opened.sha256, receivedBytes: data.length } },
    );
  }
  return { data, size: opened.size, truncated: opened.truncated };
}

/** Writes a guest file atomically through the agent: chunks, then a sha256-checked commit. */
export async function writeThroughAgent(
  channel: AgentChannel,
  path: string,
  data: Buffer,
  options: { mode?: number; createParents?: boolean; signal?: AbortSignal },
): Promise<WriteResult> {
  const { signal } = options;
  const sum = sha256(data);
  const base = {
    path,
    size: data.length,
    sha256: sum,
    ...(options.mode === undefined ? {} : { mode: options.mode }),
    ...(options.createParents ? { createParents: true } : {}),
  };
  const written = (raw: unknown) => parseWritten(raw, path, data.length, sum);
  if (data.length <= TRANSFER_CHUNK_BYTES) {
    return channel.request("file-write-open", { ...base, data: data.toString("base64") }, written, {
      signal,
      timeoutMs: REPLY_MARGIN_MS,
    });
  }
  const opened = await channel.request(
    "file-write-open",
    base,
    (raw) => {
      const r = record(raw, "result");
      integer(r.chunkBytes, "result.chunkBytes", TRANSFER_CHUNK_BYTES, TRANSFER_CHUNK_BYTES);
      return token(r.token, "result.token");
    },
    { signal, timeoutMs: REPLY_MARGIN_MS },
  );
  let committed = false;
  try {
    for (let offset = 0; offset < data.length; offset += TRANSFER_CHUNK_BYTES) {
      const piece = data.subarray(offset, offset + TRANSFER_CHUNK_BYTES);
      const end = offset + piece.length;
      await channel.request(
        "file-write-chunk",
        { token: opened, offset, data: piece.toString("base64") },
        (raw) => integer(record(raw, "result").written, "result.written", end, end),
        { signal, timeoutMs: REPLY_MARGIN_MS },
      );
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
