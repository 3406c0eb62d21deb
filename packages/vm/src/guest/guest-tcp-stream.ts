// A Duplex stream over one guest TCP connection of Gondolin's ingress channel, with bounded
// queues.
import { Duplex } from "node:stream";

/**
 * Largest piece handed to Gondolin in one `tcp_data` frame. The guest helper (`sandboxingress`)
 * closes a stream as soon as more than 256 KiB wait for its guest socket, and its frame reader
 * gives up on frames over 4 MiB, so one large `write()` must never become one frame.
 */
export const FRAME_BYTES = 64 * 1024;

/**
 * Writes wait while Gondolin's ingress queue holds more than this. The queue is shared by every
 * ingress stream of the VM and refuses frames past 64 MiB, failing whichever stream writes next.
 */
export const QUEUE_HIGH_WATER_BYTES = 4 * 1024 * 1024;

/** How often a waiting write looks at the queue again (Gondolin has no event for it). */
const QUEUE_POLL_MS = 10;

/** Options of {@link GuestTcpStream}. */
export interface GuestTcpStreamOptions {
  /** Bytes queued towards the guest on Gondolin's side, for every stream together. */
  queuedBytes?: () => number;
  /**
   * Asked when the source closes without an error event: undefined when the guest closed the
   * connection (a normal end), else the error to end with once it resolves (Gondolin tore the
   * stream down: its channel failed or the VM is closing). Without it every such close is a
   * normal end.
   */
  tornDown?: () => Promise<Error> | undefined;
}

/**
 * The stream `connectTcp` hands out, over one of Gondolin's virtio TCP streams. It fixes what a
 * plain consumer would trip over:
 *
 * - **No lost tail.** Gondolin ends a stream by pushing EOF and destroying it in the same tick. A
 *   reader that is paused then (a proxy under backpressure from a slow client) sees `close`
 *   without `end`, and the buffered bytes are gone. Here every byte is taken from Gondolin as it
 *   arrives, a guest close without an error becomes a normal `end` after the last byte, and the
 *   stream closes only once its reader has read that far (like a socket without half-open).
 * - **Bounded writes.** Writes are cut into {@link FRAME_BYTES} frames and their callbacks wait
 *   while Gondolin's shared queue is above {@link QUEUE_HIGH_WATER_BYTES}, so `pipe()` and
 *   `pipeline()` slow down to what the virtio channel carries instead of overflowing it.
 *
 * What it cannot fix, because Gondolin's protocol has no flow control: bytes from the guest arrive
 * as fast as the guest sends them and wait here until read, and the guest helper drops a stream
 * whose guest socket does not take bytes as fast as the channel delivers them.
 */
export class GuestTcpStream extends Duplex {
  readonly #source: Duplex;
  readonly #queuedBytes: () => number;
  readonly #tornDown: () => Promise<Error> | undefined;
  #sourceError: Error | undefined;
  #remoteClosed = false;
  #destroyingSource = false;
  #waitTimer: NodeJS.Timeout | undefined;
  #waitingCallback: ((error?: Error | null) => void) | undefined;

  constructor(source: Duplex, options: GuestTcpStreamOptions = {}) {
    super({ allowHalfOpen: false });
    this.#source = source;
    this.#queuedBytes = options.queuedBytes ?? (() => 0);
    this.#tornDown = options.tornDown ?? (() => undefined);
    // Flowing on purpose: Gondolin pushes regardless of backpressure, so the bytes are better kept
    // here, where a destroy of the source cannot drop them.
    source.on("data", (chunk: Buffer) => this.push(chunk));
    source.on("end", () => this.#remoteEnd());
    source.on("error", (error: Error) => {
      this.#sourceError ??= error;
    });
    source.on("close", () => this.#sourceClosed());
  }

  override _read(): void {
    // Nothing to ask for: the guest's bytes are pushed as they arrive.
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    if (this.#remoteClosed || this.#source.destroyed) {
      // The guest closed the connection; like a socket whose peer is gone, the bytes go nowhere.
      callback();
      return;
    }
    for (let offset = 0; offset < chunk.length; offset += FRAME_BYTES) {
      this.#source.write(chunk.subarray(offset, offset + FRAME_BYTES));
    }
    this.#whenQueueHasRoom(callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    // Half-close towards the guest (Gondolin sends `tcp_eof`).
    if (!this.#remoteClosed && !this.#source.destroyed) this.#source.end();
    callback();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    clearTimeout(this.#waitTimer);
    const waiting = this.#waitingCallback;
    this.#waitingCallback = undefined;
    waiting?.();
    if (!this.#source.destroyed) {
      this.#destroyingSource = true;
      this.#source.destroy();
    }
    callback(error);
  }

  #whenQueueHasRoom(callback: (error?: Error | null) => void): void {
    if (this.#queuedBytes() <= QUEUE_HIGH_WATER_BYTES || this.#source.destroyed) {
      callback();
      return;
    }
    this.#waitingCallback = callback;
    this.#waitTimer = setTimeout(() => {
      this.#waitingCallback = undefined;
      this.#whenQueueHasRoom(callback);
    }, QUEUE_POLL_MS);
  }

  #remoteEnd(): void {
    if (this.#remoteClosed) return;
    this.#remoteClosed = true;
    this.push(null);
  }

  #sourceClosed(): void {
    if (this.#destroyingSource) return;
    if (this.#sourceError) {
      this.destroy(this.#sourceError);
      return;
    }
    const tornDown = this.#tornDown();
    if (tornDown) {
      void tornDown.then((error) => this.destroy(error));
      return;
    }
    // Closed right after EOF: take what the source still buffers, then end normally.
    for (
      let chunk = this.#source.read() as Buffer | null;
      chunk !== null;
      chunk = this.#source.read() as Buffer | null
    ) {
      this.push(chunk);
    }
    this.#remoteEnd();
    // A write waiting for queue room has nowhere to go any more.
    clearTimeout(this.#waitTimer);
    const waiting = this.#waitingCallback;
    this.#waitingCallback = undefined;
    waiting?.();
  }
}
