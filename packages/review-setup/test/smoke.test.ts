import { placeholder } from "../src/index.js";
test("placeholder", () => expect(placeholder).toBe(1));
