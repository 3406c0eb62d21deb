// Following the controller log, a host file the daemon rotates to `<file>.1`: the same cursor
// scheme as the guest agent's service logs (`<inode>:<offset>` of the file the last read ended in).

import { open, type FileHandle } from "node:fs/promises";
import { LIMITS } from "@pi-sandbox/config";

/** `<inode>:<offset>`. */
export const LOG_CURSOR = /^([0-9]{1,20}):([0-9]{1,20})$/;

/** Complete lines of the controller log after a cursor. */
export interface HostLogRead {
  /** New complete lines, oldest first (a line still being written waits for the next read). */
  lines: string[];
  /** Where the next read continues. */
  cursor: string;
  /** More is waiting: read again at once. */
  more: boolean;
}

async function openIf(
  file: string,
  inode: bigint | undefined,
): Promise<{ handle: FileHandle; ino: bigint; size: number } | undefined> {
  let handle: FileHandle;
  try {
    handle = await open(file, "r");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
  const st = await handle.stat({ bigint: true });
  if (inode !== undefined && st.ino !== inode) {
    await handle.close();
    return undefined;
  }
  return { handle, ino: st.ino, size: Number(st.size) };
}

/** Complete lines of `data`, and how many bytes they take (a partial last line is left). */
function completeLines(data: Buffer): { lines: string[]; bytes: number } {
  const end = data.lastIndexOf(10);
  if (end === -1) return { lines: [], bytes: 0 };
  return { lines: data.subarray(0, end).toString("utf8").split("\n"), bytes: end + 1 };
}

async function readFrom(
  opened: { handle: FileHandle; ino: bigint; size: number },
  offset: number,
  budget: number,
  rotated = false,
): Promise<{ lines: string[]; next: number; more: boolean }> {
  try {
    const start = offset > opened.size ? 0 : offset;
    const length = Math.max(0, Math.min(budget, opened.size - start));
    const buffer = Buffer.alloc(length);
    const { bytesRead } = await opened.handle.read(buffer, 0, length, start);
    const data = buffer.subarray(0, bytesRead);
    // A line longer than the whole budget is passed on in pieces rather than waited for, and so is
    // the unfinished end of a rotated file (nothing is written to it any more).
    const whole = (bytesRead === budget && data.indexOf(10) === -1) || (rotated && start + bytesRead === opened.size);
    const complete = completeLines(data);
    const { lines, bytes } =
      whole && complete.bytes < bytesRead
        ? {
            lines: [...complete.lines, data.subarray(complete.bytes).toString("utf8")],
            bytes: bytesRead,
          }
        : complete;
    // More is waiting only when the budget cut the read (a partial last line waits for its end).
    return { lines, next: start + bytes, more: length === budget && bytes > 0 && start + bytes < opened.size };
  } finally {
    await opened.handle.close();
  }
}

/** The last `count` lines of the controller log and a cursor at their end (a missing log is empty, `0:0`). */
export async function hostLogTail(file: string, count: number): Promise<{ lines: string[]; cursor: string }> {
  const opened = await openIf(file, undefined);
  if (!opened) return { lines: [], cursor: "0:0" };
  try {
    const data = await opened.handle.readFile();
    const all = data.toString("utf8").split("\n");
    if (all.at(-1) === "") all.pop();
    return { lines: all.slice(-count), cursor: `${opened.ino}:${data.length}` };
  } finally {
    await opened.handle.close();
  }
}

/** Complete lines written to the controller log after `cursor`, at most 64 KiB of them. */
export async function hostLogSince(file: string, cursor: string): Promise<HostLogRead> {
  const match = LOG_CURSOR.exec(cursor);
  if (!match) throw new Error("not a log cursor");
  const inode = BigInt(match[1]!);
  const offset = Number(match[2]);
  const budget = LIMITS.outputMaxBytes;
  if (inode !== 0n) {
    const same = await openIf(file, inode);
    if (same) {
      const read = await readFrom(same, offset, budget);
      return { lines: read.lines, cursor: `${inode}:${read.next}`, more: read.more };
    }
    // Rotated: the rest of the old file is `.1`.
    const old = await openIf(`${file}.1`, inode);
    if (old && offset < old.size) {
      const read = await readFrom(old, offset, budget, true);
      if (read.next < old.size) return { lines: read.lines, cursor: `${inode}:${read.next}`, more: true };
      const current = await openIf(file, undefined);
      if (!current) return { lines: read.lines, cursor: "0:0", more: false };
      const ino = current.ino;
      const next = await readFrom(current, 0, budget);
      return { lines: [...read.lines, ...next.lines], cursor: `${ino}:${next.next}`, more: next.more };
    }
    if (old) await old.handle.close();
  }
  const current = await openIf(file, undefined);
  if (!current) return { lines: [], cursor: "0:0", more: false };
  const ino = current.ino;
  const read = await readFrom(current, 0, budget);
  return { lines: read.lines, cursor: `${ino}:${read.next}`, more: read.more };
}

/** A controller log line's time: the ISO timestamp it starts with (log.ts writes one). */
const LINE_TIME = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) /;

/**
 * The controller log's lines written at or after `since` (an ISO time), the rotated `.1` file
 * included, at most the last `count`; and a cursor at the current file's end. A line without a
 * time of its own goes with the line before it.
 */
export async function hostLogTailSince(
  file: string,
  since: string,
  count: number,
): Promise<{ lines: string[]; cursor: string }> {
  const from = Date.parse(since);
  const old = await openIf(`${file}.1`, undefined);
  let earlier: string[] = [];
  if (old) {
    try {
      earlier = (await old.handle.readFile()).toString("utf8").split("\n");
      if (earlier.at(-1) === "") earlier.pop();
    } finally {
      await old.handle.close();
    }
  }
  const current = await hostLogTail(file, Number.MAX_SAFE_INTEGER);
  let keep = false;
  const lines = [...earlier, ...current.lines].filter((line) => {
    const time = LINE_TIME.exec(line)?.[1];
    if (time !== undefined) keep = Date.parse(time) >= from;
    return keep;
  });
  return { lines: lines.slice(-count), cursor: current.cursor };
}
