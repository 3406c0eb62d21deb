/** Bytes of the agent's stderr kept for error details (its last bytes). */
export const STDERR_TAIL_BYTES = 4096;
/** Longest stderr line logged; the rest of a longer line is dropped. */
const STDERR_LINE_BYTES = 1024;
/** Stderr logged per channel; past it only the tail is kept (guest root can write there for ever). */
export const STDERR_LOG_BUDGET_BYTES = 64 * 1024;

/**
 * The agent's stderr as the host keeps it: the last 4 KiB for error details, and lines logged up
 * to a budget. Memory stays bounded whatever the guest writes.
 */
export class AgentStderr {
  private tail = Buffer.alloc(0);
  private line: Buffer[] = [];
  private lineBytes = 0;
  private lineCut = false;
  private logged = 0;
  private silenced = false;

  constructor(private readonly log: (line: string) => void) {}

  /** Takes one chunk of stderr. */
  push(chunk: Buffer): void {
    // Copies, so a large chunk is never kept alive by a small slice of it.
    this.tail =
      chunk.length >= STDERR_TAIL_BYTES
        ? Buffer.from(chunk.subarray(chunk.length - STDERR_TAIL_BYTES))
        : Buffer.concat([this.tail, chunk]).subarray(-STDERR_TAIL_BYTES);
    if (this.silenced) return;
    let start = 0;
    for (let nl = chunk.indexOf(10); nl !== -1; nl = chunk.indexOf(10, start)) {
      this.take(chunk.subarray(start, nl));
      this.flush();
      start = nl + 1;
      if (this.silenced) return;
    }
    this.take(chunk.subarray(start));
  }

  /** The last bytes written, as text. */
  get text(): string {
    let start = 0;
    while (start < this.tail.length && start < 4 && (this.tail[start]! & 0xc0) === 0x80) start++;
    return this.tail.subarray(start).toString("utf8");
  }

  private take(piece: Buffer): void {
    const room = STDERR_LINE_BYTES - this.lineBytes;
    if (piece.length > room) this.lineCut = true;
    const kept = piece.subarray(0, Math.max(0, room));
    if (kept.length > 0) {
      this.line.push(Buffer.from(kept));
      this.lineBytes += kept.length;
    }
  }

  private flush(): void {
    const text = Buffer.concat(this.line).toString("utf8") + (this.lineCut ? " […]" : "");
    this.line = [];
    this.lineBytes = 0;
    this.lineCut = false;
    if (!text.trim()) return;
    this.logged += Buffer.byteLength(text);
    if (this.logged > STDERR_LOG_BUDGET_BYTES) {
      this.silenced = true;
      this.log(
        `stderr past ${STDERR_LOG_BUDGET_BYTES} bytes is no longer logged (its last bytes stay in error details)`,
      );
      return;
    }
    this.log(text);
  }
}
