// Lets plain `node` run this package's TypeScript sources (type stripping) in the benchmark:
// NodeNext `./x.js` specifiers are resolved to the `./x.ts` files next to them.
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
