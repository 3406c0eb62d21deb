// The one reading of an answer's content and transfer codings that both ways out use
// (http-codings.ts): which lists are decoded, which are refused, and the decoders themselves.
import { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import { pipeline } from "node:stream/promises";
import zlib from "node:zlib";
import { answerCodings, decoderFor, rawHeaderLines } from "../src/egress/http-codings.js";

test.each([
  [[], [], []],
  [["identity"], [], []],
  [["identity, gzip"], [], ["gzip"]],
  [["gzip,"], [], ["gzip"]],
  [[" GZIP\t,, x-gzip "], [], ["gzip", "gzip"]],
  [["gzip", "br"], [], ["br", "gzip"]],
  [["deflate"], ["gzip, chunked"], ["gzip", "deflate"]],
  [[], ["chunked"], []],
  [[], ["gzip"], ["gzip"]],
])("Content-Encoding %j with Transfer-Encoding %j is decoded as %j", (content, transfer, decodings) => {
  expect(answerCodings(content, transfer)).toEqual({ ok: true, decodings });
});

test.each([
  [["zstd"], [], /content coding "zstd" is not one the host decodes/],
  [["compress, gzip"], [], /content coding "compress"/],
  [["gzip;q=1"], [], /not a plain name/],
  [['"gzip"'], [], /not a plain name/],
  [[], ["chunked, gzip"], /chunked before another coding/],
  [[], ["chunked", "chunked"], /chunked before another coding/],
  [[], ["compress, chunked"], /transfer coding "compress"/],
  [["gzip, gzip, gzip", "gzip, gzip"], [], /compressed 5 times over \(at most 4\)/],
  [["x".repeat(40)], [], /the content coding is not one the host decodes/],
])("Content-Encoding %j with Transfer-Encoding %j is refused, saying why", (content, transfer, reason) => {
  const verdict = answerCodings(content, transfer);
  expect(verdict.ok).toBe(false);
  expect(verdict.ok ? "" : verdict.reason).toMatch(reason);
});

test("every line of a header counts, in any case of its name", () => {
  expect(rawHeaderLines(["Content-Encoding", "gzip", "X", "y", "content-encoding", "br"], "content-encoding")).toEqual([
    "gzip",
    "br",
  ]);
});

test("deflate is decoded both zlib-wrapped and raw, also when the reader is slow", async () => {
  const text = Buffer.from("the quick brown fox ".repeat(200_000));
  for (const compressed of [zlib.deflateSync(text), zlib.deflateRawSync(text)]) {
    const decoder = decoderFor("deflate");
    const chunks: Buffer[] = [];
    const slow = async function* (source: AsyncIterable<Buffer>) {
      for await (const chunk of source) {
        chunks.push(chunk);
        await new Promise((resolve) => setImmediate(resolve));
      }
    };
    await pipeline(Readable.from([compressed.subarray(0, 7), compressed.subarray(7)]), decoder, slow);
    expect(Buffer.concat(chunks).equals(text)).toBe(true);
  }
});

test("gzip and br decoders give back the text; a gzip body cut short gives what it held", async () => {
  const text = Buffer.from("hello, decoded world");
  expect((await buffer(Readable.from([zlib.gzipSync(text)]).pipe(decoderFor("gzip")))).toString()).toBe(
    text.toString(),
  );
  expect((await buffer(Readable.from([zlib.brotliCompressSync(text)]).pipe(decoderFor("br")))).toString()).toBe(
    text.toString(),
  );
  const cut = zlib.gzipSync(text, { level: 0 }).subarray(0, -8);
  expect((await buffer(Readable.from([cut]).pipe(decoderFor("gzip")))).toString()).toBe(text.toString());
});
