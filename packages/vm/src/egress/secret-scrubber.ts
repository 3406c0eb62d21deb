// Keeps a secret's value out of what goes back to the guest. A server that quotes a request header
// in an error message, an echo endpoint, or an API that lists its keys would otherwise hand the
// real value to a guest that only ever held the placeholder. Every response header and body
// passing the host on its way to the guest is scanned for each value in the forms a server is
// likely to print it in, and each is replaced by the same form of the placeholder (the list is in
// VALUE_FORMS below and in the package README). Bodies are scanned as they stream: a tail one byte
// shorter than the longest form is held back between chunks, so a value split across chunks is
// still found; only bytes that may begin a form wait for the next chunk.
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

/**
 * Values of at least this many bytes (UTF-8) are also looked for inside the base64 of a longer
 * text. The pattern is then at least 15 base64 characters (90 bits of the value) at every
 * alignment; a shorter one would turn up by chance in unrelated base64 (images, hashes, tokens)
 * and be replaced there.
 */
export const MIN_EMBEDDED_BASE64_BYTES = 12;

type Form = (text: string) => string;

const base64 = (text: string): string => Buffer.from(text, "utf8").toString("base64");
const base64url = (text: string): string => base64(text).replace(/\+/g, "-").replace(/\//g, "_");
function unpadded(form: Form): Form {
  return (text) => form(text).replace(/=+$/, "");
}

/** How one JSON encoder writes a string: which characters it escapes, and how. */
interface JsonStyle {
  /** Characters written as `\uXXXX`. */
  unicode?: string;
  /** `/` written as `\/`. */
  slash?: boolean;
  /** Characters beyond ASCII written as `\uXXXX` (UTF-16 units). */
  ascii?: boolean;
  /** Upper-case hex digits in `\uXXXX`. */
  upper?: boolean;
}

const SHORT_ESCAPES: Readonly<Record<string, string>> = {
  '"': '\\"',
  "\\": "\\\\",
  "\b": "\\b",
  "\f": "\\f",
  "\n": "\\n",
  "\r": "\\r",
  "\t": "\\t",
};

/** `text` as the content of a JSON string written in `style`. */
function jsonEscape(text: string, style: JsonStyle): string {
  const hex = (char: string) => {
    const digits = char.charCodeAt(0).toString(16).padStart(4, "0");
    return `\\u${style.upper ? digits.toUpperCase() : digits}`;
  };
  let out = "";
  for (const char of text) {
    const code = char.codePointAt(0)!;
    if (style.unicode?.includes(char)) out += hex(char);
    else if (SHORT_ESCAPES[char]) out += SHORT_ESCAPES[char];
    else if (code < 0x20) out += hex(char);
    else if (char === "/" && style.slash) out += "\\/";
    else if (code > 0x7f && style.ascii) out += char.split("").map(hex).join("");
    else out += char;
  }
  return out;
}

/**
 * The JSON encoders whose escapes are looked for. The first is JSON.stringify's (also Jackson,
 * serde, Go without HTML escaping); then PHP's json_encode, Python's json.dumps, Go's
 * encoding/json and Rails (HTML-safe), Gson, .NET's System.Text.Json, and `/` as `\u002f`.
 */
const JSON_STYLES: readonly JsonStyle[] = [
  {},
  { slash: true, ascii: true },
  { ascii: true },
  { unicode: "<>&\u2028\u2029" },
  { unicode: "<>&='" },
  { unicode: "\"&'<>+`", ascii: true, upper: true },
  { unicode: "/" },
  { unicode: "/", upper: true },
];

/** The value as each encoder of JSON_STYLES writes it. */
const JSON_FORMS: readonly Form[] = JSON_STYLES.map((style) => (text: string) => jsonEscape(text, style));

/** `/` as `\/` (PHP's json_encode), the one JSON escape that base64 text meets. */
function phpSlash(form: Form): Form {
  return (text) => form(text).replace(/\//g, "\\/");
}

/**
 * The base64 characters of `text` at `shift` bytes after the start of a longer encoded text (0, 1
 * or 2: the alignment) that depend on `text` alone: those whose 6 bits all come from its bytes.
 * The characters at either end that mix bits of the text with bits of its neighbours are left out;
 * each holds at most 4 bits of the text's first or last byte.
 */
function embeddedBase64(text: string, shift: number, url: boolean): string {
  const bytes = Buffer.from(text, "utf8");
  const encoded = Buffer.concat([Buffer.alloc(shift), bytes]).toString(url ? "base64url" : "base64");
  return encoded.slice(Math.ceil((8 * shift) / 6), Math.floor((8 * (shift + bytes.length)) / 6));
}

/**
 * The base64 of a longer text that holds the value, at each of the three alignments, in both
 * alphabets, and each with PHP's `\/`; only for values of {@link MIN_EMBEDDED_BASE64_BYTES} bytes
 * or more.
 */
const EMBEDDED_FORMS: readonly Form[] = (() => {
  const embedded = [0, 1, 2].flatMap((shift) =>
    [false, true].map((url) => (text: string) => embeddedBase64(text, shift, url)),
  );
  return [...embedded, ...embedded.map(phpSlash)];
})();

/**
 * The forms a value is looked for in, each applied to the placeholder for its replacement:
 * as is; base64 and base64url with and without padding; percent-encoded (either hex case); as the
 * JSON encoders of JSON_STYLES write it; the base64 forms with PHP's `\/`; and, for values of
 * {@link MIN_EMBEDDED_BASE64_BYTES} bytes or more, the base64 of a longer text that holds the
 * value (Basic `user:value`, a JSON document), at each of the three alignments, in both
 * alphabets, also with `\/`. The replacement there is the placeholder's base64 at the same
 * alignment: its length says nothing of the value's.
 */
const VALUE_FORMS: readonly Form[] = (() => {
  const whole: Form[] = [base64, unpadded(base64), base64url, unpadded(base64url)];
  return [
    (text) => text,
    ...whole,
    (text) => encodeURIComponent(text),
    (text) => encodeURIComponent(text).replace(/%[0-9A-F]{2}/g, (escape) => escape.toLowerCase()),
    ...JSON_FORMS,
    ...whole.map(phpSlash),
    ...EMBEDDED_FORMS,
  ];
})();

/** The forms of a whole header value the host filled in: as is, and as JSON encoders write it. */
const ECHO_FORMS: readonly Form[] = [(text) => text, ...JSON_FORMS];

/** `pairs` in `forms`, without empty patterns and with the first of each `from` kept. */
function patternsOf(pairs: Iterable<ScrubbedSecret>, forms: readonly Form[]): ScrubPattern[] {
  const seen = new Map<string, ScrubPattern>();
  for (const { value, placeholder } of pairs) {
    if (!value) continue;
    const short = Buffer.byteLength(value, "utf8") < MIN_EMBEDDED_BASE64_BYTES;
    for (const form of forms) {
      if (short && EMBEDDED_FORMS.includes(form)) continue;
      const from = form(value);
      if (from && !seen.has(from))
        seen.set(from, { from: Buffer.from(from, "utf8"), to: Buffer.from(form(placeholder)) });
    }
  }
  return mergePatterns([...seen.values()]);
}

/**
 * The patterns for `secrets`: each value's forms with the placeholder's, longest first (so of two
 * forms found at one place the longer wins), without duplicates and empty values.
 */
export function scrubPatterns(secrets: Iterable<ScrubbedSecret>): ScrubPattern[] {
  return patternsOf(secrets, VALUE_FORMS);
}

/**
 * The patterns of the header values the host filled in for one request (`value`: as sent on,
 * `placeholder`: as the guest wrote it), as is and JSON-escaped, whatever their length: a server
 * that echoes the header gives back exactly what the guest wrote.
 */
export function echoPatterns(echoes: Iterable<ScrubbedSecret>): ScrubPattern[] {
  return patternsOf(echoes, ECHO_FORMS);
}

/** Several pattern lists as one: longest first, the first of each `from` kept. */
export function mergePatterns(...lists: (readonly ScrubPattern[])[]): ScrubPattern[] {
  const seen = new Map<string, ScrubPattern>();
  for (const list of lists) {
    for (const pattern of list) {
      const key = pattern.from.toString("latin1");
      if (!seen.has(key)) seen.set(key, pattern);
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

/** Patterns by their first byte: the few to compare at a position. */
type ByFirstByte = readonly (readonly Buffer[] | undefined)[];

function byFirstByte(patterns: readonly ScrubPattern[]): ByFirstByte {
  const table: Buffer[][] = [];
  for (const { from } of patterns) (table[from[0]!] ??= []).push(from);
  return table;
}

/**
 * The first position from `from` on where a pattern may start: the bytes there agree with the
 * pattern as far as they go. Everything before it can be sent; `bytes.length` when nothing may.
 * (This keeps a short streamed event, such as a server-sent event, from waiting for the next.)
 * It runs on up to the longest pattern's length of every chunk, so it compares in plain JS
 * (no Buffer.compare call per position and pattern) and only patterns with the right first byte.
 */
function firstPossibleStart(bytes: Buffer, from: number, table: ByFirstByte): number {
  for (let position = from; position < bytes.length; position++) {
    const candidates = table[bytes[position]!];
    if (!candidates) continue;
    for (const pattern of candidates) {
      const length = Math.min(pattern.length, bytes.length - position);
      let i = 1;
      while (i < length && pattern[i] === bytes[position + i]) i++;
      if (i === length) return position;
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
  private readonly table: ByFirstByte;

  constructor(private readonly patterns: readonly ScrubPattern[]) {
    this.keep = Math.max(0, ...patterns.map((pattern) => pattern.from.length - 1));
    this.table = byFirstByte(patterns);
  }

  /** The scrubbed bytes that are safe to send now (possibly a view of `chunk`). */
  push(chunk: Uint8Array): Buffer {
    // A view, not a copy: this runs on every chunk of every answer, and copies (and their garbage)
    // were a good part of its cost. What it returns may share memory with `chunk`.
    const view = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (this.patterns.length === 0) return view;
    const bytes = this.tail.length > 0 ? Buffer.concat([this.tail, view]) : view;
    const { parts, end } = replaceBefore(bytes, this.patterns, bytes.length - this.keep);
    const hold = firstPossibleStart(bytes, end, this.table);
    // A copy: the tail must not pin the whole chunk it came from.
    this.tail = Buffer.from(bytes.subarray(hold));
    // Nothing replaced (one piece): what goes is the input up to the tail, as it is.
    if (parts.length === 1) return bytes.subarray(0, hold);
    parts.push(bytes.subarray(end, hold));
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
