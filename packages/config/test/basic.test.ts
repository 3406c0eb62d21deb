import { parseConfig } from "../src/index.js";
test("minimal config parses", () => expect(parseConfig("version: 1\n").version).toBe(1));
