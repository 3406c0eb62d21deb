import { createHash } from "node:crypto";
import type { AgentChannel } from "./channel.js";
import { SupervisorError } from "./errors.js";
import type { WriteResult } from "./types.js";

/** Bytes per chunk on the wire; matches the agent's CHUNK_BYTES. */
export const TRANSFER_CHUNK_BYTES = 256 * 1024;
/** Largest file the agent holds in memory for one read. */
export const MAX_READ_BYTES = 64 * 1024 * 1024;
/** Largest file the agent accepts for one write. */
export const MAX_WRITE_BYTES = 256 * 1024 * 1024;

const REPLY_MARGIN_MS = 60_000;

function sha256(data: Buffer): string {
  return createHash("sha256").update(data).digest("hex");
}

interface ReadOpen {
  size: number;
  length: number;
  sha256: string;
  truncated: boolean;
  data?: string;
  token?: string;
}

/** Reads up to `maxBytes` of a guest file in chunks and checks the sha256 the agent computed. */
export async function readThroughAgent(
  channel: AgentChannel,
  path: string,
  maxBytes: number,
  exact: boolean,
  signal: AbortSignal | undefined,
): Promise<{ data: Buffer; size: number; truncated: boolean }> {
  const opened = await channel.request<ReadOpen>(
    "file-read-open",
    { path, maxBytes, exact },
    { signal, timeoutMs: REPLY_MARGIN_MS },
  );
  let data: Buffer;
  if (opened.data !== undefined) {
    data = Buffer.from(opened.data, "base64");
  } else {
    const token = opened.token;
    const parts: Buffer[] = [];
    let received = 0;
    try {
      while (received < opened.length) {
        const chunk = await channel.request<{ data: string }>(
          "file-read-chunk",
          { token, offset: received },
          { signal, timeoutMs: REPLY_MARGIN_MS },
        );
        const piece = Buffer.from(chunk.data, "base64");
        if (piece.length === 0) break;
        parts.push(piece);
        received += piece.length;
      }
    } finally {
      // Frees the agent's copy; best effort, the agent also drops idle transfers.
      void channel.request("file-read-close", { token }).catch(() => undefined);
    }
    data = Buffer.concat(parts);
  }
  if (data.length !== opened.length || sha256(data) !== opened.sha256) {
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
  const base = {
    path,
    size: data.length,
    sha256: sha256(data),
    ...(options.mode === undefined ? {} : { mode: options.mode }),
    ...(options.createParents ? { createParents: true } : {}),
  };
  if (data.length <= TRANSFER_CHUNK_BYTES) {
    const done = await channel.request<{ path: string; size: number; sha256: string }>(
      "file-write-open",
      { ...base, data: data.toString("base64") },
      { signal, timeoutMs: REPLY_MARGIN_MS },
    );
    return { path: done.path, sizeBytes: done.size, sha256: done.sha256 };
  }
  const opened = await channel.request<{ token: string }>("file-write-open", base, {
    signal,
    timeoutMs: REPLY_MARGIN_MS,
  });
  let committed = false;
  try {
    for (let offset = 0; offset < data.length; offset += TRANSFER_CHUNK_BYTES) {
      const piece = data.subarray(offset, offset + TRANSFER_CHUNK_BYTES);
      await channel.request(
        "file-write-chunk",
        { token: opened.token, offset, data: piece.toString("base64") },
        { signal, timeoutMs: REPLY_MARGIN_MS },
      );
    }
    const done = await channel.request<{ path: string; size: number; sha256: string }>(
      "file-write-commit",
      { token: opened.token },
      { signal, timeoutMs: REPLY_MARGIN_MS },
    );
    committed = true;
    return { path: done.path, sizeBytes: done.size, sha256: done.sha256 };
  } finally {
    if (!committed) void channel.request("file-write-abort", { token: opened.token }).catch(() => undefined);
  }
}
