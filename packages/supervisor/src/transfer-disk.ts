// Large file transfers through the VM's transfer disk (a raw file the host shares with the guest as
// a second virtio-blk drive, see the vm package's transfer-disk.ts): the bytes cross in windows of
// that file, a ring of them, so the host fills (or empties) one window while the guest drains (or
// fills) the next; the channel only names each piece. Every piece's CRC-32 is checked against the
// host's own (agent/pi_sandbox_agent/disk_transfer.py): the check is for accidental damage, and
// the host reads only the windows it named, bounded by the lengths it decided.
import { createHash } from "node:crypto";
import fs from "node:fs";
import fsp from "node:fs/promises";
import { crc32 } from "node:zlib";
import type { TransferDisk } from "@pi-sandbox/vm";
import type { AgentChannel } from "./channel.js";
import { SupervisorError, isSupervisorError } from "./errors.js";
import { REPLY_MARGIN_MS } from "./options.js";
import { TRANSFER_CHUNK_BYTES } from "./protocol.js";
import { BadReply, base64Bytes, integer, readExtent, record, text } from "./reply-checks.js";
import type { WriteResult } from "./types.js";

/** Bytes of one window: the most one request moves (the agent's PIECE_MAX_BYTES). */
export const DISK_WINDOW_BYTES = 16 * 1024 * 1024;
/** Windows in the ring, at most (fewer on a smaller drive; two at least). */
const DISK_RING_MAX = 4;
const CRC32_MAX = 0xffff_ffff;

/** A VM's transfer disk as transfers use it: one transfer at a time. */
export interface DiskLane {
  readonly path: string;
  readonly sizeBytes: number;
  /** Byte offsets of the windows in the drive file. */
  readonly windows: readonly number[];
  /** A transfer holds the drive (the next one goes over the stream meanwhile). */
  busy: boolean;
  /** The agent has no disk operations or no drive: every transfer of this VM goes over the stream. */
  unusable: boolean;
}

const lanes = new WeakMap<TransferDisk, DiskLane>();

/**
 * The lane of a VM's transfer disk, one per VM however many clients attach to it; undefined
 * without a disk or one too small for two windows, or with `PI_SANDBOX_TRANSFER_DISK=off` (the
 * benchmarks' way to time the stream path).
 */
export function diskLaneOf(disk: TransferDisk | undefined): DiskLane | undefined {
  if (!disk || process.env.PI_SANDBOX_TRANSFER_DISK === "off") return undefined;
  let lane = lanes.get(disk);
  if (!lane) {
    const count = Math.min(DISK_RING_MAX, Math.floor(disk.sizeBytes / DISK_WINDOW_BYTES));
    if (count < 2) return undefined;
    const windows = Array.from({ length: count }, (_, i) => i * DISK_WINDOW_BYTES);
    lane = { path: disk.path, sizeBytes: disk.sizeBytes, windows, busy: false, unusable: false };
    lanes.set(disk, lane);
  }
  return lane;
}

/**
 * The agent cannot use the disk (an older agent without the operations, a guest without the
 * drive): nothing was opened, and the caller moves the file over the stream instead.
 */
export class DiskUnavailable extends Error {
  constructor(cause: unknown) {
    super("the guest cannot use the transfer disk", { cause });
    this.name = "DiskUnavailable";
  }
}

/** An open's failure that means "no disk here" rather than a failed transfer. */
function unavailable(error: unknown): never {
  const agentCode = isSupervisorError(error) ? (error.details as { agentCode?: unknown }).agentCode : undefined;
  if (agentCode === "UNKNOWN_OP" || agentCode === "TRANSFER_DISK_MISSING") throw new DiskUnavailable(error);
  throw error;
}

function mismatch(path: string, what: string, details: Record<string, unknown>): SupervisorError {
  return new SupervisorError(
    "FILE_CHECKSUM_MISMATCH",
    `the content of ${path} ${what} (CRC-32 mismatch through the transfer disk); nothing was kept`,
    { hint: "retry", details: { path, ...details } },
  );
}

function crcOf(value: unknown, what: string): number {
  return integer(value, what, 0, CRC32_MAX);
}

/** Opens the drive file: never through a link, never created. */
function openDrive(lane: DiskLane, write: boolean): Promise<fsp.FileHandle> {
  const { O_RDONLY, O_RDWR, O_NOFOLLOW } = fs.constants;
  return fsp.open(lane.path, (write ? O_RDWR : O_RDONLY) | O_NOFOLLOW);
}

/**
 * Gives the drive file's blocks back to the host after a transfer (truncated to nothing and back
 * to its size: QEMU reads a hole as zeros), so an idle VM's run directory holds no copy's bytes.
 */
async function emptyDrive(lane: DiskLane): Promise<void> {
  const drive = await openDrive(lane, true).catch(() => undefined);
  try {
    await drive?.truncate(0);
    await drive?.truncate(lane.sizeBytes);
  } catch {
    // best effort: the next transfer overwrites the windows it uses anyway
  } finally {
    await drive?.close().catch(() => undefined);
  }
}

async function readExactly(drive: fsp.FileHandle, length: number, position: number): Promise<Buffer> {
  const piece = Buffer.allocUnsafe(length);
  let done = 0;
  while (done < length) {
    const { bytesRead } = await drive.read(piece, done, length - done, position + done);
    if (bytesRead === 0) throw new Error(`the transfer disk ended ${length - done} bytes early`);
    done += bytesRead;
  }
  return piece;
}

/**
 * Reads up to `maxBytes` of a guest file through the disk into `sink`, piece by piece: the agent
 * fills window k+1 while the host takes window k. Each piece must be exactly as long as asked and
 * carry the CRC-32 of what the host reads back; anything else fails the read (the sink's data is
 * then to be discarded). Returns the sha256 the host computed of what it received.
 */
export async function readThroughDisk(
  channel: AgentChannel,
  lane: DiskLane,
  path: string,
  maxBytes: number,
  exact: boolean,
  sink: { write(piece: Buffer): Promise<void> | void; onProgress?(done: number, total: number): void },
  signal: AbortSignal | undefined,
): Promise<{ size: number; length: number; sha256: string; truncated: boolean }> {
  const opened = await channel
    .request(
      "file-disk-read-open",
      { path, maxBytes, exact },
      (raw) => {
        const r = record(raw, "result");
        const { size, length, truncated } = readExtent(r, maxBytes);
        if (length <= TRANSFER_CHUNK_BYTES && r.data !== undefined) {
          const data = base64Bytes(r.data, "result.data", length);
          return { size, length, truncated, token: undefined, data, crc: crcOf(r.crc32, "result.crc32") };
        }
        return { size, length, truncated, token: text(r.token, "result.token", 64) };
      },
      { signal, timeoutMs: REPLY_MARGIN_MS },
    )
    .catch(unavailable);
  const hash = createHash("sha256");
  if (opened.token === undefined) {
    // A small file came inline, as through the channel.
    const { data, crc } = opened as { data: Buffer; crc: number };
    if (crc32(data) !== crc) throw mismatch(path, "arrived damaged", { offset: 0 });
    await sink.write(data);
    sink.onProgress?.(data.length, data.length);
    return {
      size: opened.size,
      length: opened.length,
      sha256: hash.update(data).digest("hex"),
      truncated: opened.truncated,
    };
  }
  const token = opened.token;
  const { windows } = lane;
  const piece = (k: number) => {
    const offset = k * DISK_WINDOW_BYTES;
    const length = Math.min(DISK_WINDOW_BYTES, opened.length - offset);
    const window = windows[k % windows.length]!;
    return channel
      .request(
        "file-disk-read-piece",
        { token, offset, length, window },
        (raw) => {
          const r = record(raw, "result");
          integer(r.offset, "result.offset", offset, offset);
          return { got: integer(r.length, "result.length", 0, length), crc: crcOf(r.crc32, "result.crc32") };
        },
        { signal, timeoutMs: REPLY_MARGIN_MS },
      )
      .then((reply) => ({ ...reply, offset, length, window }));
  };
  const count = Math.ceil(opened.length / DISK_WINDOW_BYTES);
  let pending: ReturnType<typeof piece> | undefined;
  let drive: fsp.FileHandle | undefined;
  try {
    drive = await openDrive(lane, false);
    pending = count > 0 ? piece(0) : undefined;
    for (let k = 0; k < count; k++) {
      const done = await pending!;
      if (done.got !== done.length) {
        throw mismatch(path, "shrank while it was read", {
          length: opened.length,
          receivedBytes: done.offset + done.got,
        });
      }
      // The guest fills the next window while this one is taken.
      pending = k + 1 < count ? piece(k + 1) : undefined;
      const bytes = await readExactly(drive, done.length, done.window);
      if (crc32(bytes) !== done.crc) throw mismatch(path, "arrived damaged", { offset: done.offset });
      hash.update(bytes);
      await sink.write(bytes);
      sink.onProgress?.(done.offset + done.length, opened.length);
    }
  } finally {
    await pending?.catch(() => undefined);
    await drive?.close().catch(() => undefined);
    await emptyDrive(lane);
    // Frees the agent's open file; best effort, the agent also drops idle transfers.
    void channel.request("file-read-close", { token }, () => undefined).catch(() => undefined);
  }
  return { size: opened.size, length: opened.length, sha256: hash.digest("hex"), truncated: opened.truncated };
}

/**
 * Writes a guest file through the disk: the host puts piece k+1 into its window while the agent
 * takes piece k into the temp file; each reply must name exactly the bytes written so far and
 * their running CRC-32, and the commit renames the file into place once the whole CRC-32 agrees.
 * Anything else aborts the write (the agent removes the temp file).
 */
export async function writeThroughDisk(
  channel: AgentChannel,
  lane: DiskLane,
  path: string,
  source: {
    size: number;
    sha256: string;
    read(offset: number, length: number): Promise<Buffer> | Buffer;
    onProgress?(done: number, total: number): void;
  },
  options: { mode?: number; createParents?: boolean; signal?: AbortSignal },
): Promise<WriteResult> {
  const { signal } = options;
  const { size } = source;
  const args = {
    path,
    size,
    ...(options.mode === undefined ? {} : { mode: options.mode }),
    ...(options.createParents ? { createParents: true } : {}),
  };
  const token = await channel
    .request("file-disk-write-open", args, (raw) => text(record(raw, "result").token, "result.token", 64), {
      signal,
      timeoutMs: REPLY_MARGIN_MS,
    })
    .catch(unavailable);
  const { windows } = lane;
  let committed = false;
  let drive: fsp.FileHandle | undefined;
  let crc = 0;
  /** Puts piece k into its window; resolves with the running CRC-32 up to its end. */
  const fill = async (k: number) => {
    const offset = k * DISK_WINDOW_BYTES;
    const length = Math.min(DISK_WINDOW_BYTES, size - offset);
    const bytes = await source.read(offset, length);
    if (bytes.length !== length) throw new Error(`the source gave ${bytes.length} bytes at ${offset}, not ${length}`);
    const window = windows[k % windows.length]!;
    await drive!.write(bytes, 0, length, window);
    crc = crc32(bytes, crc);
    return { offset, length, window, crc };
  };
  let filling: ReturnType<typeof fill> | undefined;
  try {
    drive = await openDrive(lane, true);
    const count = Math.ceil(size / DISK_WINDOW_BYTES);
    filling = count > 0 ? fill(0) : undefined;
    for (let k = 0; k < count; k++) {
      const piece = await filling!;
      const end = piece.offset + piece.length;
      const taken = channel.request(
        "file-disk-write-piece",
        { token, offset: piece.offset, length: piece.length, window: piece.window },
        (raw) => {
          const r = record(raw, "result");
          integer(r.written, "result.written", end, end);
          return crcOf(r.crc32, "result.crc32");
        },
        { signal, timeoutMs: REPLY_MARGIN_MS },
      );
      taken.catch(() => undefined);
      // The host fills the next window while the guest takes this one.
      filling = k + 1 < count ? fill(k + 1) : undefined;
      filling?.catch(() => undefined);
      if ((await taken) !== piece.crc) throw mismatch(path, "arrived damaged", { offset: piece.offset });
      source.onProgress?.(end, size);
    }
    const done = await channel.request(
      "file-disk-write-commit",
      { token, crc32: crc },
      (raw) => {
        const r = record(raw, "result");
        if (text(r.path, "result.path") !== path) throw new BadReply("result.path", "is not the path written");
        integer(r.size, "result.size", size, size);
        integer(r.crc32, "result.crc32", crc, crc);
        return { path, sizeBytes: size, sha256: source.sha256 };
      },
      { signal, timeoutMs: REPLY_MARGIN_MS },
    );
    committed = true;
    return done;
  } finally {
    await filling?.catch(() => undefined);
    await drive?.close().catch(() => undefined);
    await emptyDrive(lane);
    if (!committed) void channel.request("file-write-abort", { token }, () => undefined).catch(() => undefined);
  }
}
