// Primitive checks of what the agent sends. Everything from the guest is untrusted: a value that
// is not what the host asked for throws BadReply, which the channel turns into AGENT_PROTOCOL and
// closes on. Free text (output, messages) is cut to a cap instead, with the cut marked and counted.

/** A reply that breaks the protocol; `what` names the field. */
export class BadReply extends Error {
  constructor(
    readonly what: string,
    problem: string,
  ) {
    super(`${what} ${problem}`);
    this.name = "BadReply";
  }
}

/** Longest short string accepted (paths, names, versions), in bytes. */
export const SHORT_TEXT_BYTES = 4096;
/** Longest message kept from the agent (error texts, readiness errors); longer ones are cut. */
export const MESSAGE_BYTES = 4096;

/** A plain JSON object. */
export function record(value: unknown, what: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new BadReply(what, "is not an object");
  return value as Record<string, unknown>;
}

/** An integer in [min, max]. */
export function integer(value: unknown, what: string, min = 0, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min || value > max) {
    throw new BadReply(what, `is not an integer from ${min} to ${max}`);
  }
  return value;
}

/** An optional integer in [min, max]; undefined when absent. */
export function optionalInteger(value: unknown, what: string, min = 0, max = Number.MAX_SAFE_INTEGER) {
  return value === undefined ? undefined : integer(value, what, min, max);
}

/** A boolean. */
export function boolean(value: unknown, what: string): boolean {
  if (typeof value !== "boolean") throw new BadReply(what, "is not a boolean");
  return value;
}

/** A string of at most `maxBytes` UTF-8 bytes. */
export function text(value: unknown, what: string, maxBytes = SHORT_TEXT_BYTES): string {
  if (typeof value !== "string") throw new BadReply(what, "is not a string");
  // A JS string never takes more than 3 UTF-8 bytes per UTF-16 unit; count exactly only near the cap.
  if (value.length * 3 > maxBytes && Buffer.byteLength(value) > maxBytes) {
    throw new BadReply(what, `is longer than ${maxBytes} bytes`);
  }
  return value;
}

/** An optional short string; undefined when absent. */
export function optionalText(value: unknown, what: string, maxBytes = SHORT_TEXT_BYTES): string | undefined {
  return value === undefined ? undefined : text(value, what, maxBytes);
}

/** A string or null. */
export function nullableText(value: unknown, what: string, maxBytes = SHORT_TEXT_BYTES): string | null {
  return value === null ? null : text(value, what, maxBytes);
}

/** One of `choices`. */
export function oneOf<T extends string>(value: unknown, what: string, choices: readonly T[]): T {
  if (typeof value !== "string" || !(choices as readonly string[]).includes(value)) {
    throw new BadReply(what, `is not one of ${choices.join(", ")}`);
  }
  return value as T;
}

/** An array of at most `maxItems` items. */
export function list(value: unknown, what: string, maxItems: number): unknown[] {
  if (!Array.isArray(value)) throw new BadReply(what, "is not an array");
  if (value.length > maxItems)
    throw new BadReply(what, `has ${value.length} items, more than the ${maxItems} expected`);
  return value;
}

/** Distinct names, each one of `allowed`. */
export function namesFrom(value: unknown, what: string, allowed: ReadonlySet<string>): string[] {
  const names = list(value, what, allowed.size).map((item, i) => text(item, `${what}[${i}]`));
  const seen = new Set<string>();
  for (const name of names) {
    if (!allowed.has(name))
      throw new BadReply(what, `names ${JSON.stringify(name.slice(0, 64))}, which was not asked for`);
    if (seen.has(name)) throw new BadReply(what, `names ${JSON.stringify(name)} twice`);
    seen.add(name);
  }
  return names;
}

/** Exactly `bytes` bytes of standard base64 (with padding), checked before decoding. */
/**
 * The extent of a read's opening reply: `length` bytes of at most `maxBytes` come, of a file of
 * `size`, and `truncated` says whether that is less than the file (a guest that says otherwise is
 * refused).
 */
export function readExtent(
  r: Record<string, unknown>,
  maxBytes: number,
): { size: number; length: number; truncated: boolean } {
  const length = integer(r.length, "result.length", 0, maxBytes);
  const size = integer(r.size, "result.size", length);
  const truncated = boolean(r.truncated, "result.truncated");
  if (truncated !== size > length)
    throw new BadReply("result.truncated", `is ${truncated} for ${length} of ${size} bytes`);
  return { size, length, truncated };
}

export function base64Bytes(value: unknown, what: string, bytes: number): Buffer {
  if (typeof value !== "string") throw new BadReply(what, "is not a string");
  if (value.length !== 4 * Math.ceil(bytes / 3)) {
    throw new BadReply(what, `holds about ${Math.floor((value.length * 3) / 4)} bytes, not the ${bytes} expected`);
  }
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(value)) throw new BadReply(what, "is not base64");
  const data = Buffer.from(value, "base64");
  if (data.length !== bytes) throw new BadReply(what, `decodes to ${data.length} bytes, not the ${bytes} expected`);
  return data;
}

/** A message cut to `maxBytes` (never rejected: it is only shown). */
export function message(value: unknown, what: string, maxBytes = MESSAGE_BYTES): string {
  if (typeof value !== "string") throw new BadReply(what, "is not a string");
  return value.length * 3 <= maxBytes ? value : capText(value, maxBytes, "head", "message").text;
}

/** Room kept for the marker inside a cap (the agent keeps the same). */
const MARKER_ROOM = 96;

/** Text capped to `maxBytes` UTF-8 bytes with the cut marked, and how many bytes were left out. */
export function capText(
  value: string,
  maxBytes: number,
  keep: "head" | "tail" | "head-tail",
  what = "output",
): { text: string; omittedBytes: number } {
  const data = Buffer.from(value, "utf8");
  if (data.length <= maxBytes) return { text: value, omittedBytes: 0 };
  const room = maxBytes - MARKER_ROOM;
  const marker = (omitted: number) => `\n[... pi-sandbox: ${omitted} bytes of ${what} omitted ...]\n`;
  if (keep === "head") {
    const head = cutEnd(data.subarray(0, room));
    return { text: head.toString("utf8") + marker(data.length - head.length), omittedBytes: data.length - head.length };
  }
  if (keep === "tail") {
    const tail = cutStart(data.subarray(data.length - room));
    const omitted = data.length - tail.length;
    return { text: marker(omitted).replace(/^\n/, "") + tail.toString("utf8"), omittedBytes: omitted };
  }
  const head = cutEnd(data.subarray(0, Math.floor(room / 4)));
  const tail = cutStart(data.subarray(data.length - (room - Math.floor(room / 4))));
  const omitted = data.length - head.length - tail.length;
  return { text: head.toString("utf8") + marker(omitted) + tail.toString("utf8"), omittedBytes: omitted };
}

/** Drops a trailing partial UTF-8 sequence. */
function cutEnd(data: Buffer): Buffer {
  let end = data.length;
  let back = 0;
  while (end > 0 && back < 4 && (data[end - 1]! & 0xc0) === 0x80) {
    end--;
    back++;
  }
  if (end > 0 && data[end - 1]! >= 0xc0) {
    const lead = data[end - 1]!;
    const need = lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
    if (back + 1 < need) return data.subarray(0, end - 1);
  }
  return data;
}

/** Drops leading continuation bytes. */
function cutStart(data: Buffer): Buffer {
  let start = 0;
  while (start < data.length && start < 4 && (data[start]! & 0xc0) === 0x80) start++;
  return data.subarray(start);
}

/** Error details kept from the agent: a few primitive fields, strings cut; anything else dropped. */
export function safeDetails(value: unknown): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return {};
  const kept: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value).slice(0, 16)) {
    if (key.length > 64) continue;
    if (typeof item === "string") kept[key] = item.length > 1024 ? `${item.slice(0, 1024)}…` : item;
    else if (typeof item === "number" || typeof item === "boolean" || item === null) kept[key] = item;
  }
  return kept;
}
