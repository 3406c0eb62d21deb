// The repository's Jest environment (jest.environment.cjs at the root): an error that Node itself
// creates counts as an Error inside a test file's realm, as it does in production.
import { readFile } from "node:fs/promises";

test("an error Node creates is an instance of Error, and of no subclass it does not belong to", async () => {
  const missing = await readFile("/nonexistent/pi-sandbox").catch((error: unknown) => error);
  expect(missing instanceof Error).toBe(true);
  expect((missing as NodeJS.ErrnoException).code).toBe("ENOENT");
  class Other extends Error {}
  expect(missing instanceof Other).toBe(false);
  expect(new Other() instanceof Error).toBe(true);
  expect({ message: "not an error" } instanceof Error).toBe(false);
});

test("a RangeError thrown by Buffer is an Error too", () => {
  let thrown: unknown;
  try {
    Buffer.alloc(2).readUInt32BE(0);
  } catch (error) {
    thrown = error;
  }
  expect(thrown instanceof Error).toBe(true);
});
