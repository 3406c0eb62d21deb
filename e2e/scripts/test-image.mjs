#!/usr/bin/env node
// Build (or reuse) the guest test image and print its absolute path as the last stdout line.
// Progress goes to stderr. The image is `pi-sandbox image build`'s default one, named
// "test-image", built by @pi-sandbox/image into the same cache, so a user's `image build` and
// this script share one build. See e2e/README.md.
//
//   npm run -s test-image              build or reuse
//   npm run -s test-image -- --rebuild build again even if cached
import { buildImage } from "@pi-sandbox/image";

const args = process.argv.slice(2);
const unknown = args.filter((a) => a !== "--rebuild");
if (unknown.length > 0) {
  process.stderr.write(`test-image: unknown argument ${unknown.join(" ")} (only --rebuild is accepted)\n`);
  process.exit(2);
}

try {
  const image = await buildImage({ name: "test-image", rebuild: args.includes("--rebuild"), prune: true });
  process.stdout.write(`${image.dir}\n`);
} catch (err) {
  process.stderr.write(`test-image: ${err instanceof Error ? err.message : String(err)}\n`);
  if (err?.hint) process.stderr.write(`  hint: ${err.hint}\n`);
  if (err instanceof Error && err.cause) process.stderr.write(`  caused by: ${String(err.cause)}\n`);
  process.exit(1);
}
