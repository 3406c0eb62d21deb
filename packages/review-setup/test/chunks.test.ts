import fc from "fast-check";
import { base64Chunks, DEFAULT_CHUNK_CHARS, partName } from "../src/chunks.js";

test("parts concatenate and decode back to the bytes, each within the size", () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 5000 }), fc.integer({ min: 4, max: 900 }), (bytes, size) => {
      const parts = base64Chunks(bytes, size);
      for (const part of parts) expect(part.length).toBeLessThanOrEqual(size);
      expect(Buffer.from(parts.join(""), "base64")).toEqual(Buffer.from(bytes));
      expect(parts.length).toBe(Math.ceil((Math.ceil(bytes.length / 3) * 4) / (size - (size % 4))));
    }),
  );
});

test("the default part stays well under the controller's 1 MiB write cap", () => {
  const parts = base64Chunks(new Uint8Array(1_200_000));
  expect(parts.map((p) => p.length)).toEqual([
    DEFAULT_CHUNK_CHARS,
    DEFAULT_CHUNK_CHARS,
    1_600_000 - 2 * DEFAULT_CHUNK_CHARS,
  ]);
  expect(DEFAULT_CHUNK_CHARS).toBeLessThan(1024 * 1024);
});

test("part names sort in order as a shell glob would list them", () => {
  const names = [0, 1, 9, 10, 100, 99999].map(partName);
  expect([...names].sort()).toEqual(names);
  expect(partName(7)).toBe("part-000007");
});

test("refuses a size below one base64 quantum", () => {
  expect(() => base64Chunks(new Uint8Array(3), 3)).toThrow(RangeError);
});
