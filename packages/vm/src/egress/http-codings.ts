// The content and transfer codings of an answer the host must scan for secrets, for both ways out
// (secret-fetch.ts and host-port-proxy.ts): one strict reading of both lists, and the decoders.
// A body the scrubber sees must be the decoded one, so the host decodes every coding itself and
// refuses the answer when it cannot (an unknown coding, a coding with parameters, `chunked` that
// is not last): a body passed on still compressed would reach the guest unscanned. No client
// library is left to decide: undici's fetch, for one, silently skips decoding when it meets a
// member it does not know (`identity, gzip`, or the empty member of `gzip,`).
import { Transform, type TransformCallback } from "node:stream";
import zlib from "node:zlib";

/** A coding the host decodes (`x-gzip` is gzip). */
export type Decoding = "gzip" | "deflate" | "br";

/** What to do with an answer's body: decode it with these, in this order, or refuse it. */
export type CodingsVerdict = { ok: true; decodings: Decoding[] } | { ok: false; reason: string };

/** At most this many layers of compression are undone (undici's own bound is 5). */
export const MAX_DECODINGS = 4;

/** RFC 9110's token: a coding name, without parameters or quotes. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Space and tab around list members (RFC 9110's OWS). */
const OWS = /^[ \t]+|[ \t]+$/g;

const DECODINGS: Readonly<Record<string, Decoding | "identity">> = {
  gzip: "gzip",
  "x-gzip": "gzip",
  deflate: "deflate",
  br: "br",
  identity: "identity",
};

/**
 * The members of one coding list (all header lines of it): lowercased, without the empty members
 * that RFC 9110's list syntax allows (`gzip,`, `, gzip`); undefined when a member is not a token
 * (a parameter, a quoted string).
 */
function members(lines: readonly string[]): string[] | undefined {
  const out: string[] = [];
  for (const line of lines) {
    for (const raw of line.split(",")) {
      const member = raw.replace(OWS, "");
      if (member === "") continue;
      if (!TOKEN.test(member)) return undefined;
      out.push(member.toLowerCase());
    }
  }
  return out;
}

/** A coding name quoted in a refusal, if short (it is whatever the server wrote; callers scrub it). */
const quoted = (coding: string): string => (coding.length <= 24 ? ` "${coding}"` : "");

/**
 * How to read a body that came with these `Content-Encoding` and `Transfer-Encoding` header lines
 * (after the HTTP parser took off a final `chunked`): every coding undone, outermost first
 * (transfer codings, then content codings, each list from its end), or why it cannot be.
 * `identity` is no coding; `chunked` is framing and must be the last transfer coding.
 */
export function answerCodings(contentEncoding: readonly string[], transferEncoding: readonly string[]): CodingsVerdict {
  const content = members(contentEncoding);
  const transfer = members(transferEncoding);
  if (!content || !transfer) {
    return { ok: false, reason: "a coding in its Content-Encoding or Transfer-Encoding is not a plain name" };
  }
  const chunked = transfer.indexOf("chunked");
  if (chunked >= 0 && chunked !== transfer.length - 1) {
    return { ok: false, reason: "its Transfer-Encoding lists chunked before another coding" };
  }
  const decodings: Decoding[] = [];
  for (const [list, header] of [
    [transfer.slice(0, chunked >= 0 ? chunked : undefined), "transfer"],
    [content, "content"],
  ] as const) {
    for (const coding of [...list].reverse()) {
      const decoding = DECODINGS[coding];
      if (!decoding) return { ok: false, reason: `the ${header} coding${quoted(coding)} is not one the host decodes` };
      if (decoding !== "identity") decodings.push(decoding);
    }
  }
  if (decodings.length > MAX_DECODINGS) {
    return { ok: false, reason: `it is compressed ${decodings.length} times over (at most ${MAX_DECODINGS})` };
  }
  return { ok: true, decodings };
}

/** Every value of header `name` (any case) in Node's raw list (`[name, value, name, value, …]`). */
export function rawHeaderLines(raw: readonly string[], name: string): string[] {
  const lines: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) lines.push(raw[i + 1]!);
  return lines;
}

// As lenient as browsers and undici's fetch: a body cut short after its last complete block still
// gives what it held instead of an error.
const ZLIB_LENIENT = { flush: zlib.constants.Z_SYNC_FLUSH, finishFlush: zlib.constants.Z_SYNC_FLUSH };
const BROTLI_LENIENT = {
  flush: zlib.constants.BROTLI_OPERATION_FLUSH,
  finishFlush: zlib.constants.BROTLI_OPERATION_FLUSH,
};

/** A Node stream that undoes `decoding`. */
export function decoderFor(decoding: Decoding): Transform {
  if (decoding === "gzip") return zlib.createGunzip(ZLIB_LENIENT);
  if (decoding === "br") return zlib.createBrotliDecompress(BROTLI_LENIENT);
  return new InflateEither();
}

/**
 * `deflate` as servers send it: RFC 9110 means zlib-wrapped data, but some servers send raw
 * deflate; the first byte tells them apart (a zlib header has compression method 8 in its low
 * nibble), as browsers and undici do.
 */
class InflateEither extends Transform {
  private inner: zlib.Inflate | zlib.InflateRaw | undefined;

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    if (!this.inner) {
      this.inner = (chunk[0]! & 0x0f) === 0x08 ? zlib.createInflate(ZLIB_LENIENT) : zlib.createInflateRaw(ZLIB_LENIENT);
      this.inner.on("data", (data: Buffer) => {
        if (!this.push(data)) this.inner!.pause();
      });
      this.inner.on("error", (error) => this.destroy(error));
    }
    this.inner.write(chunk, () => callback());
  }

  override _read(size: number): void {
    this.inner?.resume();
    super._read(size);
  }

  override _flush(callback: TransformCallback): void {
    if (!this.inner) return callback();
    this.inner.once("end", () => callback());
    this.inner.end();
  }

  override _destroy(error: Error | null, callback: (error: Error | null) => void): void {
    this.inner?.destroy();
    callback(error);
  }
}
