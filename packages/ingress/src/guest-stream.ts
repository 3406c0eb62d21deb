import { duplexPair, type Duplex } from "node:stream";

/**
 * Puts a guest stream behind a stream of our own that keeps every byte until its reader takes it.
 *
 * Gondolin's virtio TCP streams end by pushing EOF and destroying themselves in the same tick.
 * A reader paused at that moment (undici under backpressure from a slow preview client) sees
 * `close` without `end` while bytes are still buffered, and undici then cuts a framed response or
 * silently shortens a close-delimited one. Here a close without an error is treated as EOF: the
 * buffered bytes are drained into the pair and the pair is ended normally. A close after an
 * error (a reset) still destroys the pair with that error.
 */
export function adaptGuestStream(source: Duplex): Duplex {
  const [inner, outer] = duplexPair();
  let sourceError: Error | undefined;
  let ownDestroy = false;

  // Guest -> reader, with backpressure while the source supports it.
  source.on("data", (chunk: Buffer) => {
    if (!inner.write(chunk)) source.pause();
  });
  inner.on("drain", () => source.resume());
  source.on("end", () => inner.end());
  source.on("error", (error: Error) => {
    sourceError = error;
  });
  source.on("close", () => {
    if (ownDestroy) return;
    if (sourceError) {
      // Destroy the reader's side itself: a pair passes destruction on, but not the error.
      outer.destroy(sourceError);
      return;
    }
    if (!source.readableEnded) {
      // Destroyed right after EOF: what is still buffered is readable, so pass it on.
      for (let chunk = source.read() as Buffer | null; chunk !== null; chunk = source.read() as Buffer | null) {
        inner.write(chunk);
      }
      inner.end();
    }
  });

  // Reader -> guest. Ending our side half-closes the guest stream, as the caller asked.
  inner.on("data", (chunk: Buffer) => {
    if (source.destroyed) return;
    if (!source.write(chunk)) inner.pause();
  });
  source.on("drain", () => inner.resume());
  inner.on("end", () => {
    if (!source.destroyed) source.end();
  });

  // The reader gave up: tear the guest stream down.
  outer.once("close", () => {
    if (!source.destroyed) {
      ownDestroy = true;
      source.destroy();
    }
    inner.destroy();
  });
  inner.on("error", () => undefined);
  return outer;
}
