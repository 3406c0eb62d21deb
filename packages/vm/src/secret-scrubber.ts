// Keeps a secret's value out of what goes back to the guest. A server that quotes a request header
// in an error message, an echo endpoint, or an API that lists its keys would otherwise hand the
// real value to a guest that only ever held the placeholder. Every response header and body
// passing the host on its way to the guest is scanned for each value in the forms a server is
// likely to print it in (as is, base64 and base64url with and without padding, percent-encoded),
// and each is replaced by the same form of the placeholder. Bodies are scanned as they stream: a
// tail one byte shorter than the longest form is held back between chunks, so a value split
// across chunks is still found; only bytes that may begin a value wait for the next chunk.
import { Transform, type TransformCallback } from "node:stream";

/** A secret as the scrubber needs it: what to look for and what to put instead. */
export interface ScrubbedSecret {
  /** The real value, never to reach the guest. */
  value: string;
  /** What the guest sees instead. */
  placeholder: string;
}

/** One byte pattern and its replacement. */
export interface ScrubPattern {
  /** Bytes of one form of a value. */
  from: Buffer;
  /** The same form of the placeholder. */
  to: Buffer;
}

const base64 = (text: string): string => Buffer.from(text, "utf8").toString("base64");
const base64url = (text: string): string => base64(text).replace(/\+/g, "-").replace(/\//g, "_");

// The forms a value is looked for in. Not the base64 of a longer text that contains it (Basic
// `user:value`): its characters depend on what precedes the value.
const FORMS: readonly ((text: string) => string)[] = [
  (text) => text,
  (text) => base64(text),
  (text) => base64(text).replace(/=+$/, ""),
  (text) => base64url(text),
  (text) => base64url(text).replace(/=+$/, ""),
  (text) => encodeURIComponent(text),
  (text) => encodeURIComponent(text).replace(/%[0-9A-F]{2}/g, (escape) => escape.toLowerCase()),
];

/**
 * The patterns for `secrets`: each value's forms with the placeholder's, longest first (so of two
 * forms found at one place the longer wins), without duplicates and empty values.
 */
export function scrubPatterns(secrets: Iterable<ScrubbedSecret>): ScrubPattern[] {
  const seen = new Map<string, ScrubPattern>();
  for (const { value, placeholder } of secrets) {
    if (!value) continue;
    for (const form of FORMS) {
      const from = form(value);
      if (from && !seen.has(from))
        seen.set(from, { from: Buffer.from(from, "utf8"), to: Buffer.from(form(placeholder)) });
    }
  }
  return [...seen.values()].sort((a, b) => b.from.length - a.from.length);
}

/**
 * The scrubbed pieces of `bytes` up to `end`: every pattern that starts before `limit` replaced
 * (leftmost first, the longest at a tie); `end` is `limit`, or past a replacement that crosses it.
 */
function replaceBefore(
  bytes: Buffer,
  patterns: readonly ScrubPattern[],
  limit: number,
): { parts: Buffer[]; end: number } {
  const parts: Buffer[] = [];
  const next = patterns.map((pattern) => bytes.indexOf(pattern.from));
  let position = 0;
  for (;;) {
    let best = -1;
    for (let i = 0; i < patterns.length; i++) {
      if (next[i]! >= 0 && (best < 0 || next[i]! < next[best]!)) best = i;
    }
    if (best < 0 || next[best]! >= limit) break;
    const start = next[best]!;
    const pattern = patterns[best]!;
    parts.push(bytes.subarray(position, start), pattern.to);
    position = start + pattern.from.length;
    for (let i = 0; i < patterns.length; i++) {
      if (next[i]! >= 0 && next[i]! < position) next[i] = bytes.indexOf(patterns[i]!.from, position);
    }
  }
  const end = Math.max(position, Math.min(limit, bytes.length));
  parts.push(bytes.subarray(position, end));
  return { parts, end };
}

/**
 * The first position from `from` on where a pattern may start: the bytes there agree with the
 * pattern as far as they go. Everything before it can be sent; `bytes.length` when nothing may.
 * (This keeps a short streamed event, such as a server-sent event, from waiting for the next.)
 */
function firstPossibleStart(bytes: Buffer, from: number, patterns: readonly ScrubPattern[]): number {
  for (let position = from; position < bytes.length; position++) {
    for (const { from: pattern } of patterns) {
      const length = Math.min(pattern.length, bytes.length - position);
      if (bytes.compare(pattern, 0, length, position, position + length) === 0) return position;
    }
  }
  return bytes.length;
}

/** `bytes` with every form of every value replaced (a whole header value, a reason phrase). */
export function scrubBytes(bytes: Buffer, patterns: readonly ScrubPattern[]): Buffer {
  if (patterns.length === 0) return bytes;
  const { parts } = replaceBefore(bytes, patterns, bytes.length);
  return parts.length === 1 ? bytes : Buffer.concat(parts);
}

/** A header value or reason phrase (a latin1 byte string, as HTTP carries it) scrubbed. */
export function scrubText(text: string, patterns: readonly ScrubPattern[]): string {
  if (patterns.length === 0) return text;
  const bytes = Buffer.from(text, "latin1");
  const scrubbed = scrubBytes(bytes, patterns);
  return scrubbed === bytes ? text : scrubbed.toString("latin1");
}

/**
 * The scrubber of one body: `push` each chunk and send what it returns, then send what `end`
 * returns. Holds back only a tail that may begin a pattern: at most the longest pattern's length
 * minus one byte.
 */
export class StreamScrubber {
  private tail: Buffer = Buffer.alloc(0);
  private readonly keep: number;

  constructor(private readonly patterns: readonly ScrubPattern[]) {
    this.keep = Math.max(0, ...patterns.map((pattern) => pattern.from.length - 1));
  }

  /** The scrubbed bytes that are safe to send now. */
  push(chunk: Uint8Array): Buffer {
    if (this.patterns.length === 0) return Buffer.from(chunk);
    const bytes = this.tail.length > 0 ? Buffer.concat([this.tail, chunk]) : Buffer.from(chunk);
    const { parts, end } = replaceBefore(bytes, this.patterns, bytes.length - this.keep);
    const hold = firstPossibleStart(bytes, end, this.patterns);
    parts.push(bytes.subarray(end, hold));
    // A copy: the tail must not pin the whole chunk it came from.
    this.tail = Buffer.from(bytes.subarray(hold));
    return Buffer.concat(parts);
  }

  /** The rest, scrubbed, once the body has ended. */
  end(): Buffer {
    const rest = scrubBytes(this.tail, this.patterns);
    this.tail = Buffer.alloc(0);
    return rest;
  }
}

/** A web stream of `body` with every pattern replaced, for a fetch `Response`. */
export function scrubWebStream(
  body: ReadableStream<Uint8Array>,
  patterns: readonly ScrubPattern[],
): ReadableStream<Uint8Array> {
  const scrubber = new StreamScrubber(patterns);
  return body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        const out = scrubber.push(chunk);
        if (out.length > 0) controller.enqueue(out);
      },
      flush(controller) {
        const out = scrubber.end();
        if (out.length > 0) controller.enqueue(out);
      },
    }),
  );
}

/** A Node stream that replaces every pattern in what passes through it. */
export class ScrubTransform extends Transform {
  private readonly scrubber: StreamScrubber;

  constructor(patterns: readonly ScrubPattern[]) {
    super();
    this.scrubber = new StreamScrubber(patterns);
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    const out = this.scrubber.push(chunk);
    callback(null, out.length > 0 ? out : undefined);
  }

  override _flush(callback: TransformCallback): void {
    const out = this.scrubber.end();
    callback(null, out.length > 0 ? out : undefined);
  }
}
