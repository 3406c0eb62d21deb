// The agent's stdout cut into lines, each bounded: a line longer than MAX_AGENT_LINE_BYTES is a
// protocol error (the guest is broken or hostile), never an unbounded buffer on the host.

import { MAX_AGENT_LINE_BYTES } from "./protocol.js";

/** Splits chunks into complete lines of at most MAX_AGENT_LINE_BYTES bytes. */
export class AgentLines {
  private buffered: Buffer[] = [];
  private bufferedBytes = 0;
  private discarding = false;

  constructor(
    private readonly onLine: (line: string) => void,
    /** Called for a line over the limit (the channel fails, and calls discard). */
    private readonly onOverflow: () => void,
  ) {}

  /** Delivers every complete line in `chunk`; keeps the rest for the next chunk. */
  push(chunk: Buffer): void {
    // After a protocol error the rest of the stream is read (so the guest is not blocked) and dropped.
    if (this.discarding) return;
    let start = 0;
    for (let nl = chunk.indexOf(10); nl !== -1; nl = chunk.indexOf(10, start)) {
      if (this.bufferedBytes + (nl - start) > MAX_AGENT_LINE_BYTES) return this.overflow();
      this.buffered.push(chunk.subarray(start, nl));
      const line = Buffer.concat(this.buffered).toString("utf8");
      this.buffered = [];
      this.bufferedBytes = 0;
      start = nl + 1;
      this.onLine(line);
      if (this.discarding) return;
    }
    if (start < chunk.length) {
      if (this.bufferedBytes + (chunk.length - start) > MAX_AGENT_LINE_BYTES) return this.overflow();
      this.buffered.push(chunk.subarray(start));
      this.bufferedBytes += chunk.length - start;
    }
  }

  /** Drops what is buffered and everything that follows. */
  discard(): void {
    this.discarding = true;
    this.buffered = [];
    this.bufferedBytes = 0;
  }

  private overflow(): void {
    this.onOverflow();
  }
}
