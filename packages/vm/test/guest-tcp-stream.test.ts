// GuestTcpStream over a stand-in for Gondolin's TCP stream: a paused reader still gets every byte and
// the end, writes go out in bounded frames and wait for room, and closes travel both ways.
import { randomBytes } from "node:crypto";
import { Duplex } from "node:stream";
import { pipeline } from "node:stream/promises";
import { ingressClosedByGuest } from "../src/gondolin-private.js";
import { FRAME_BYTES, GuestTcpStream, QUEUE_HIGH_WATER_BYTES } from "../src/guest/guest-tcp-stream.js";

/**
 * Behaves like Gondolin's `TcpForwardStream`: guest bytes are pushed whatever the reader does,
 * every write becomes one frame at once (the callback never waits), and a guest close pushes EOF
 * and destroys the stream in the same tick.
 */
class GondolinLikeStream extends Duplex {
  readonly frames: Buffer[] = [];
  readonly sent: string[] = [];
  /** Set when the guest closed the connection, as Gondolin's stream has it. */
  closedByRemote = false;

  override _read(): void {}

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    if (this.closedByRemote) return callback(new Error("tcp stream closed"));
    this.frames.push(Buffer.from(chunk));
    callback();
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.sent.push("tcp_eof");
    callback();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    if (!this.closedByRemote) this.sent.push("tcp_close");
    callback(error);
  }

  fromGuest(data: Buffer): void {
    this.push(data);
  }

  guestCloses(): void {
    this.closedByRemote = true;
    this.push(null);
    this.destroy();
  }
}

const tick = (ms = 0) => new Promise((resolve) => setTimeout(resolve, ms));

/** Reads `stream` to its end; rejects if it closes without `end`. */
function readAll(stream: Duplex): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("end", () => resolve(Buffer.concat(chunks)));
    stream.on("error", reject);
    stream.on("close", () => reject(new Error("closed without end")));
  });
}

/** The guest sends `body` in pieces, then closes, while nobody reads. */
async function guestSendsThenCloses(source: GondolinLikeStream, body: Buffer): Promise<void> {
  for (let offset = 0; offset < body.length; offset += 8192) source.fromGuest(body.subarray(offset, offset + 8192));
  source.guestCloses();
  await tick(20);
}

describe("GuestTcpStream", () => {
  test("a reader that was paused when the guest closed still gets every byte and then end", async () => {
    const body = randomBytes(1024 * 1024);
    const source = new GondolinLikeStream();
    const stream = new GuestTcpStream(source);
    await guestSendsThenCloses(source, body);
    expect(stream.destroyed).toBe(false);
    expect((await readAll(stream)).equals(body)).toBe(true);
  });

  test("without it, the same paused reader loses the tail (the Gondolin behaviour it fixes)", async () => {
    const source = new GondolinLikeStream();
    const seen: string[] = [];
    source.on("end", () => seen.push("end")).on("close", () => seen.push("close"));
    await guestSendsThenCloses(source, randomBytes(64 * 1024));
    expect(seen).toEqual(["close"]);
  });

  test("once the reader has read to the end, the stream closes by itself", async () => {
    const source = new GondolinLikeStream();
    const stream = new GuestTcpStream(source);
    await guestSendsThenCloses(source, Buffer.from("bye"));
    const closed = new Promise((resolve) => stream.once("close", resolve));
    expect((await readAll(stream)).toString()).toBe("bye");
    await closed;
    // The guest side was already gone: nothing more was sent to it.
    expect(source.sent).toEqual([]);
  });

  test("a guest error reaches the reader as that error", async () => {
    const source = new GondolinLikeStream();
    const stream = new GuestTcpStream(source);
    const failure = new Error("ingress virtio bridge error");
    const reading = readAll(stream);
    source.fromGuest(Buffer.from("partial"));
    source.destroy(failure);
    await expect(reading).rejects.toBe(failure);
  });

  test("a stream Gondolin tears down ends with the error its owner gives, not a normal end", async () => {
    const vmClosed = new Error("the VM test is closed");
    let source = new GondolinLikeStream();
    const options = { tornDown: () => (ingressClosedByGuest(source) ? undefined : Promise.resolve(vmClosed)) };
    let reading = readAll(new GuestTcpStream(source, options));
    source.fromGuest(Buffer.from("partial"));
    source.destroy(); // no tcp_close from the guest: Gondolin's teardown
    await expect(reading).rejects.toBe(vmClosed);

    // The guest's own close still ends normally.
    source = new GondolinLikeStream();
    reading = readAll(new GuestTcpStream(source, options));
    await guestSendsThenCloses(source, Buffer.from("bye"));
    await expect(reading).resolves.toEqual(Buffer.from("bye"));
  });

  test("large writes reach the guest whole, in frames of at most 64 KiB", async () => {
    const source = new GondolinLikeStream();
    const stream = new GuestTcpStream(source);
    const body = randomBytes(5 * 1024 * 1024 + 123);
    await new Promise<void>((resolve, reject) => stream.write(body, (error) => (error ? reject(error) : resolve())));
    expect(Math.max(...source.frames.map((frame) => frame.length))).toBe(FRAME_BYTES);
    expect(Buffer.concat(source.frames).equals(body)).toBe(true);
    stream.destroy();
  });

  test("writes wait while Gondolin's shared queue is over the high-water mark", async () => {
    const source = new GondolinLikeStream();
    let queued = QUEUE_HIGH_WATER_BYTES + 1;
    const stream = new GuestTcpStream(source, { queuedBytes: () => queued });
    const chunks = Array.from({ length: 8 }, () => randomBytes(32 * 1024));
    const piping = pipeline(async function* () {
      yield* chunks;
    }, stream);
    await tick(100);
    // The first write went out; its callback (and so every later write) waits for room.
    expect(source.frames.length).toBe(1);
    queued = 0;
    await piping;
    expect(Buffer.concat(source.frames).equals(Buffer.concat(chunks))).toBe(true);
    expect(source.sent).toEqual(["tcp_eof"]);
    stream.destroy();
  });

  test("a write waiting for room is released when the guest closes", async () => {
    const source = new GondolinLikeStream();
    const stream = new GuestTcpStream(source, { queuedBytes: () => Number.MAX_SAFE_INTEGER });
    const written = new Promise<void>((resolve, reject) =>
      stream.write(Buffer.from("x"), (error) => (error ? reject(error) : resolve())),
    );
    await tick(30);
    source.guestCloses();
    await written;
    stream.resume();
    await new Promise((resolve) => stream.once("close", resolve));
  });

  test("destroying the stream closes the guest connection; ending it half-closes", async () => {
    const ended = new GondolinLikeStream();
    const halfClosed = new GuestTcpStream(ended);
    halfClosed.end("last words");
    await tick();
    expect(ended.sent).toEqual(["tcp_eof"]);
    expect(ended.destroyed).toBe(false);
    // The guest may still answer after the half-close.
    ended.fromGuest(Buffer.from("answer"));
    ended.guestCloses();
    expect((await readAll(halfClosed)).toString()).toBe("answer");

    const cut = new GondolinLikeStream();
    const stream = new GuestTcpStream(cut);
    stream.destroy();
    await tick();
    expect(cut.destroyed).toBe(true);
    expect(cut.sent).toEqual(["tcp_close"]);
  });

  test("bytes written after the guest closed go nowhere and do not fail the unread answer", async () => {
    const source = new GondolinLikeStream();
    const stream = new GuestTcpStream(source);
    source.fromGuest(Buffer.from("413 too large"));
    source.guestCloses();
    await tick();
    await new Promise<void>((resolve, reject) =>
      stream.write(Buffer.alloc(1024), (error) => (error ? reject(error) : resolve())),
    );
    expect((await readAll(stream)).toString()).toBe("413 too large");
  });
});
