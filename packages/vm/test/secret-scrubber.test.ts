// The scrubber that turns a secret's value back into the placeholder in what goes to the guest
// (secret-scrubber.ts): every form, whole texts, and bodies streamed in pieces of any size.
import { Readable } from "node:stream";
import { text } from "node:stream/consumers";
import { ScrubTransform, StreamScrubber, scrubPatterns, scrubText, scrubWebStream } from "../src/secret-scrubber.js";

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
