// File operations for copies of large files and whole directories: streamed reads and writes
// (nothing the size of the file is held in memory on either side), what a path is, a directory's
// tree, and mkdir. Reached as `SupervisorClient.files`.

import type { AgentChannel } from "./channel.js";
import { checkAbsolute } from "./call-args.js";
import { SupervisorError } from "./errors.js";
import { listThroughAgent, mkdirThroughAgent, statThroughAgent, type GuestStat, type GuestTree } from "./file-tree.js";
import { readThroughAgentTo, writeThroughAgent, type ReadSink, type WriteSource } from "./file-transfer.js";
import { StreamUnreachable, type GuestConnect } from "./transfer-stream.js";
import { DiskUnavailable, readThroughDisk, writeThroughDisk, type DiskLane } from "./transfer-disk.js";
import type { CallOptions } from "./options.js";
import { MAX_READ_BYTES, MAX_WRITE_BYTES, TRANSFER_CHUNK_BYTES } from "./protocol.js";
import type { WriteResult } from "./types.js";

/** Default and largest `maxEntries` of {@link GuestFiles.list}. */
export const LIST_MAX_ENTRIES = 20_000;

function checkSize(value: number, max: number, key: string): void {
  if (!Number.isInteger(value) || value < 0 || value > max) {
    throw new SupervisorError("INVALID_ARGUMENT", `${key} must be an integer from 0 to ${max}`, {
      details: { key, value },
    });
  }
}

/**
 * Streamed and tree file operations on the guest, through the agent. With `disk`, the bytes of a
 * file larger than one chunk cross the VM's transfer disk (transfer-disk.ts) when it is free;
 * otherwise, with `connect`, they go down a raw stream of their own (transfer-stream.ts).
 */
export class GuestFiles {
  constructor(
    private readonly channel: AgentChannel,
    private connect?: GuestConnect,
    private readonly disk?: DiskLane,
  ) {}

  /**
   * Runs a transfer through the disk when this VM has one, it is free and the file is larger than
   * a chunk; else, or when the agent cannot use the disk (nothing opened then), `otherwise`.
   */
  private async viaDisk<T>(
    bytes: number,
    transfer: (lane: DiskLane) => Promise<T>,
    otherwise: () => Promise<T>,
  ): Promise<T> {
    const lane = this.disk;
    if (!lane || lane.busy || lane.unusable || bytes <= TRANSFER_CHUNK_BYTES) return otherwise();
    lane.busy = true;
    try {
      return await transfer(lane);
    } catch (error) {
      if (!(error instanceof DiskUnavailable)) throw error;
      lane.unusable = true;
    } finally {
      lane.busy = false;
    }
    return otherwise();
  }

  /**
   * Runs a transfer with its stream, and again over the channel when the stream could not be
   * opened (no byte moved then); later transfers of this object use the channel at once.
   */
  private async streamed<T>(transfer: (connect: GuestConnect | undefined) => Promise<T>): Promise<T> {
    if (!this.connect) return transfer(undefined);
    try {
      return await transfer(this.connect);
    } catch (error) {
      if (!(error instanceof StreamUnreachable)) throw error;
      this.connect = undefined;
      return transfer(undefined);
    }
  }

  /** What `path` is, without following a final symbolic link; FILE_NOT_FOUND when nothing. */
  async stat(path: string, options: CallOptions = {}): Promise<GuestStat> {
    checkAbsolute(path);
    return statThroughAgent(this.channel, path, options);
  }

  /**
   * Every entry under directory `path` (links not followed), parents before children, at most
   * `maxEntries` (default and at most 20000): `truncated` says the listing stopped there.
   */
  async list(path: string, options: CallOptions & { maxEntries?: number } = {}): Promise<GuestTree> {
    checkAbsolute(path);
    const maxEntries = options.maxEntries ?? LIST_MAX_ENTRIES;
    checkSize(maxEntries, LIST_MAX_ENTRIES, "maxEntries");
    return listThroughAgent(this.channel, path, Math.max(1, maxEntries), options);
  }

  /** Creates directory `path` and its missing parents; an existing directory is fine. */
  async mkdir(path: string, options: CallOptions & { mode?: number } = {}): Promise<void> {
    checkAbsolute(path);
    return mkdirThroughAgent(this.channel, path, options);
  }

  /**
   * Streams a guest file (at most `maxBytes`, default and at most 256 MiB; FILE_TOO_LARGE above)
   * into `sink` chunk by chunk, then checks the sha256 of everything received against the one the
   * agent computed (FILE_CHECKSUM_MISMATCH: discard what the sink got).
   */
  async readTo(
    path: string,
    sink: ReadSink,
    options: CallOptions & { maxBytes?: number } = {},
  ): Promise<{ size: number; sha256: string }> {
    checkAbsolute(path);
    const maxBytes = options.maxBytes ?? MAX_READ_BYTES;
    checkSize(maxBytes, MAX_READ_BYTES, "maxBytes");
    const read = await this.viaDisk(
      maxBytes,
      (lane) => readThroughDisk(this.channel, lane, path, maxBytes, true, sink, options.signal),
      () =>
        this.streamed((connect) =>
          readThroughAgentTo(this.channel, path, maxBytes, true, sink, options.signal, connect),
        ),
    );
    return { size: read.length, sha256: read.sha256 };
  }

  /**
   * Writes a guest file from `source` (at most 256 MiB) chunk by chunk; the agent checks the
   * sha256 before it renames the file into place (atomic; an existing file keeps its owner).
   */
  async writeFrom(
    path: string,
    source: WriteSource,
    options: CallOptions & { mode?: number; createParents?: boolean } = {},
  ): Promise<WriteResult> {
    checkAbsolute(path);
    if (source.size > MAX_WRITE_BYTES) {
      throw new SupervisorError(
        "FILE_TOO_LARGE",
        `cannot write ${path}: ${source.size} bytes is more than the ${MAX_WRITE_BYTES} allowed`,
        { hint: "copy an archive in parts", details: { path, sizeBytes: source.size, maxBytes: MAX_WRITE_BYTES } },
      );
    }
    return this.viaDisk(
      source.size,
      (lane) => writeThroughDisk(this.channel, lane, path, source, options),
      () => this.streamed((connect) => writeThroughAgent(this.channel, path, source, options, connect)),
    );
  }
}
