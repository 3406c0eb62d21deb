#!/usr/bin/env node
// Build (or reuse) the guest test image and print its absolute path as the last stdout line.
// Progress goes to stderr. See e2e/README.md.
//
//   npm run -s test-image              build or reuse
//   npm run -s test-image -- --rebuild build again even if cached
import { ensureTestImage } from "./lib/build.mjs";

const args = process.argv.slice(2);
const unknown = args.filter((a) => a !== "--rebuild");
if (unknown.length > 0) {
  process.stderr.write(`test-image: unknown argument ${unknown.join(" ")} (only --rebuild is accepted)\n`);
  process.exit(2);
}

try {
  const dir = await ensureTestImage({ rebuild: args.includes("--rebuild") });
  process.stdout.write(`${dir}\n`);
} catch (err) {
  process.stderr.write(`test-image: ${err instanceof Error ? err.message : String(err)}\n`);
  if (err instanceof Error && err.cause) process.stderr.write(`  caused by: ${String(err.cause)}\n`);
  process.exit(1);
}
