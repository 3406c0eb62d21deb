// The sha256 of a file, streamed: the one implementation that checks a guest image against its
// manifest, both on `image import` (@pi-sandbox/image) and before a boot (@pi-sandbox/vm).
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";

/** The sha256 of `file`'s content as lowercase hex, read in chunks (a rootfs is gigabytes). */
export async function sha256File(file: string, options: { signal?: AbortSignal } = {}): Promise<string> {
  const hash = createHash("sha256");
  // 1 MiB reads: a third faster than the 64 KiB default on a 1.4 GB rootfs (1.1 s against 1.5 s).
  const stream = createReadStream(file, {
    highWaterMark: 1 << 20,
    ...(options.signal ? { signal: options.signal } : {}),
  });
  for await (const chunk of stream) hash.update(chunk as Buffer);
  return hash.digest("hex");
}
