// Writes sandbox.schema.json from the built package, so the published file is generated from the
// same valibot schema parseConfig uses. Runs after `tsc` in the build; a test keeps the committed
// file equal to the schema in code.
import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { sandboxJsonSchema } from "../dist/index.js";

const target = fileURLToPath(new URL("../sandbox.schema.json", import.meta.url));
const text = `${JSON.stringify(sandboxJsonSchema(), null, 2)}\n`;
const current = await readFile(target, "utf8").catch(() => undefined);
if (current !== text) {
  await writeFile(target, text);
  console.log(`wrote ${target}`);
}
