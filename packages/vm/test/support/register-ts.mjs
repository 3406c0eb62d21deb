// Lets a plain `node --experimental-strip-types` child process (used by tests that kill their
// own helper processes) import this package's TypeScript sources, which use NodeNext `./x.js`
// specifiers for `./x.ts` files.
import { registerHooks } from "node:module";
import fs from "node:fs";
import { fileURLToPath } from "node:url";

registerHooks({
  resolve(specifier, context, nextResolve) {
    if (
      specifier.endsWith(".js") &&
      (specifier.startsWith(".") || specifier.startsWith("file:")) &&
      context.parentURL
    ) {
      const candidate = new URL(specifier.replace(/\.js$/, ".ts"), context.parentURL);
      if (fs.existsSync(fileURLToPath(candidate))) return nextResolve(candidate.href, context);
    }
    return nextResolve(specifier, context);
  },
});
