// The scrubber that turns a secret's value back into the placeholder in what goes to the guest
// (secret-scrubber.ts): every form, whole texts, and bodies streamed in pieces of any size.
import { Readable } from "node:stream";
import { text } from "node:stream/consumers";
import {
  ScrubTransform,
  StreamScrubber,
  echoPatterns,
  mergePatterns,
  scrubPatterns,
  scrubText,
  scrubWebStream,
} from "../src/egress/secret-scrubber.js";

const VALUE = "sk-real/value+with?odd=chars";
const PLACEHOLDER = "PI_SANDBOX_SECRET_0123456789abcdef";
const patterns = scrubPatterns([{ value: VALUE, placeholder: PLACEHOLDER }]);

const b64 = (s: string) => Buffer.from(s).toString("base64");
const b64url = (s: string) => Buffer.from(s).toString("base64").replace(/\+/g, "-").replace(/\//g, "_");
/** The value in every form a server might print it in, each with what the guest must see instead. */
const FORMS: [string, string, string][] = [
  ["as is", VALUE, PLACEHOLDER],
  ["base64", b64(VALUE), b64(PLACEHOLDER)],
  ["base64 without padding", b64(VALUE).replace(/=+$/, ""), b64(PLACEHOLDER).replace(/=+$/, "")],
  ["base64url", b64url(VALUE), b64url(PLACEHOLDER)],
  ["base64url without padding", b64url(VALUE).replace(/=+$/, ""), b64url(PLACEHOLDER).replace(/=+$/, "")],
  ["percent-encoded", encodeURIComponent(VALUE), encodeURIComponent(PLACEHOLDER)],
];

test.each(FORMS)("the value %s becomes the placeholder in the same form", (_form, sent, expected) => {
  expect(scrubText(`error: bad header value "${sent}"!`, patterns)).toBe(`error: bad header value "${expected}"!`);
});

test("lowercase percent escapes are found too, and a text without the value is returned as it was", () => {
  const lower = encodeURIComponent(VALUE).replace(/%[0-9A-F]{2}/g, (e) => e.toLowerCase());
  expect(scrubText(`k=${lower}`, patterns)).not.toContain(lower);
  const clean = "nothing to see";
  expect(scrubText(clean, patterns)).toBe(clean);
});

test("every occurrence is replaced, also back to back and of two secrets", () => {
  const two = scrubPatterns([
    { value: VALUE, placeholder: PLACEHOLDER },
    { value: "second-secret-42", placeholder: "PH2" },
  ]);
  expect(scrubText(`${VALUE}${VALUE} second-secret-42 ${VALUE}`, two)).toBe(
    `${PLACEHOLDER}${PLACEHOLDER} PH2 ${PLACEHOLDER}`,
  );
});

/** `body` pushed through a StreamScrubber in pieces of `size` bytes. */
function scrubInPieces(body: Buffer, size: number): string {
  const scrubber = new StreamScrubber(patterns);
  const out: Buffer[] = [];
  for (let i = 0; i < body.length; i += size) out.push(scrubber.push(body.subarray(i, i + size)));
  out.push(scrubber.end());
  return Buffer.concat(out).toString();
}

test("a streamed body is scrubbed whatever the chunk size, also with every form split across chunks", () => {
  const body = Buffer.from(FORMS.map(([, sent]) => `[${sent}]`).join(" ") + " tail");
  const expected = FORMS.map(([, , shown]) => `[${shown}]`).join(" ") + " tail";
  for (const size of [1, 2, 3, 5, 7, 11, 64, body.length]) {
    expect({ size, out: scrubInPieces(body, size) }).toEqual({ size, out: expected });
  }
});

test("the scrubber holds back only bytes that may begin a value, so a short event is sent at once", () => {
  const scrubber = new StreamScrubber(patterns);
  expect(scrubber.push(Buffer.from("data: one\n\n")).toString()).toBe("data: one\n\n");
  // "sk-re" may be the start of the value: it waits for the next chunk, the rest goes.
  expect(scrubber.push(Buffer.from("data: sk-re")).toString()).toBe("data: ");
  expect(scrubber.push(Buffer.from("ady\n")).toString()).toBe("sk-ready\n");
  expect(scrubber.push(Buffer.from(VALUE.slice(0, 10))).toString()).toBe("");
  expect(scrubber.end().toString()).toBe(VALUE.slice(0, 10));
});

test("the Node and web stream wrappers scrub a value split over two chunks", async () => {
  const pieces = [`a ${VALUE.slice(0, 5)}`, `${VALUE.slice(5)} b`];
  expect(await text(Readable.from(pieces.map((p) => Buffer.from(p))).pipe(new ScrubTransform(patterns)))).toBe(
    `a ${PLACEHOLDER} b`,
  );
  const web = scrubWebStream(
    Readable.toWeb(Readable.from(pieces.map((p) => Buffer.from(p)))) as ReadableStream<Uint8Array>,
    patterns,
  );
  expect(await new Response(web).text()).toBe(`a ${PLACEHOLDER} b`);
});

/** The base64 characters of `bytes` after `k` unknown bytes that depend on `bytes` alone. */
function middle(bytes: Buffer, k: number, url: boolean): string {
  const text = Buffer.concat([Buffer.alloc(k), bytes]).toString(url ? "base64url" : "base64");
  return text.slice(Math.ceil((8 * k) / 6), Math.floor((8 * (k + bytes.length)) / 6));
}

describe("the value inside the base64 of a longer text", () => {
  // Prefixes of 3, 4 and 5 bytes put the value at each of the three alignments of base64.
  const CASES = ["ab:", "use:", "user:"].flatMap((prefix) =>
    [false, true].map((url) => [prefix.length % 3, url ? "URL-safe" : "standard", prefix, url] as const),
  );

  test.each(CASES)(
    "after %i unknown bytes (%s alphabet) becomes the placeholder's base64 at the same place, whatever the chunk size",
    (k, _alphabet, prefix, url) => {
      const encode = (text: string) => Buffer.from(text).toString(url ? "base64url" : "base64");
      const sent = encode(`${prefix}${VALUE}@example.com`);
      const core = middle(Buffer.from(VALUE), k, url);
      const start = sent.indexOf(core);
      expect(start).toBeGreaterThan(0);
      // Only the characters that depend on the value alone change; the ones beside them (at most
      // 4 bits of the value's first and last byte each) stay as the server sent them.
      const expected =
        sent.slice(0, start) + middle(Buffer.from(PLACEHOLDER), k, url) + sent.slice(start + core.length);
      const body = Buffer.from(`{"auth":"Basic ${sent}"}`);
      for (const size of [1, 2, 3, 5, 7, 11, 64, body.length]) {
        expect({ size, out: scrubInPieces(body, size) }).toEqual({ size, out: `{"auth":"Basic ${expected}"}` });
      }
    },
  );

  test("PHP's JSON escape of a slash in that base64 is caught too", () => {
    const sent = Buffer.from(`user:${VALUE}!`).toString("base64").replace(/\//g, "\\/");
    expect(scrubText(sent, patterns)).not.toContain(middle(Buffer.from(VALUE), 2, false).replace(/\//g, "\\/"));
  });

  test("a value under 12 bytes is looked for in its own base64 only: a shorter pattern would match by chance", () => {
    const short = scrubPatterns([{ value: "short-val", placeholder: PLACEHOLDER }]);
    const inside = Buffer.from("user:short-val").toString("base64");
    expect(scrubText(inside, short)).toBe(inside);
    expect(scrubText(b64("short-val"), short)).toBe(b64(PLACEHOLDER));
  });
});

describe("the value as JSON encoders print it", () => {
  const json = VALUE.replace(/\//g, "\\/");
  const STYLES: [string, string][] = [
    ["PHP (a slash as \\/)", json],
    ["a slash as \\u002f", VALUE.replace(/\//g, "\\u002f")],
    ["a slash as \\u002F", VALUE.replace(/\//g, "\\u002F")],
    [".NET (+ as \\u002B)", VALUE.replace(/\+/g, "\\u002B")],
    ["Gson (= as \\u003d)", VALUE.replace(/=/g, "\\u003d")],
  ];
  test.each(STYLES)("%s becomes the placeholder", (_style, sent) => {
    expect(scrubText(`{"key":"${sent}"}`, patterns)).toBe(`{"key":"${PLACEHOLDER}"}`);
  });

  test("non-ASCII characters are found as Python and PHP escape them", () => {
    const accented = "clé-secrète-123456";
    const withAccents = scrubPatterns([{ value: accented, placeholder: PLACEHOLDER }]);
    const python = accented.replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
    expect(python).toBe("cl\\u00e9-secr\\u00e8te-123456");
    expect(scrubText(`{"k": "${python}"}`, withAccents)).toBe(`{"k": "${PLACEHOLDER}"}`);
  });

  test("quotes and backslashes in a value are found escaped as JSON.stringify writes them", () => {
    const odd = 'pa"ss\\word-1234567';
    const withQuote = scrubPatterns([{ value: odd, placeholder: PLACEHOLDER }]);
    expect(scrubText(JSON.stringify({ k: odd }), withQuote)).toBe(JSON.stringify({ k: PLACEHOLDER }));
  });
});

test("a header value the host filled in is replaced whole by what the guest wrote, whatever the secret's length", () => {
  const guest = `Basic ${b64("me:PH")}`;
  const real = `Basic ${b64("me:ab")}`;
  const echoes = mergePatterns(
    scrubPatterns([{ value: "ab", placeholder: "PH" }]),
    echoPatterns([{ value: real, placeholder: guest }]),
  );
  expect(scrubText(`you sent ${real}`, echoes)).toBe(`you sent ${guest}`);
  expect(scrubText(`blob ${b64("me:ab")} and ${JSON.stringify(real)}`, echoes)).toBe(
    `blob ${b64("me:PH")} and ${JSON.stringify(guest)}`,
  );
});

test("the scrubber still holds back no more than the longest pattern, however many forms there are", () => {
  const scrubber = new StreamScrubber(patterns);
  const longest = Math.max(...patterns.map((pattern) => pattern.from.length));
  const out = scrubber.push(Buffer.from(`x`.repeat(1000) + VALUE.slice(0, -1)));
  expect(out.length).toBeGreaterThanOrEqual(1000 + VALUE.length - longest);
  expect(Buffer.concat([out, scrubber.push(Buffer.from(VALUE.slice(-1))), scrubber.end()]).toString()).toBe(
    "x".repeat(1000) + PLACEHOLDER,
  );
});
