// Lets plain `node --experimental-strip-types` run the workspace's TypeScript sources, whose
// NodeNext `./x.js` specifiers name `./x.ts` files (vm's kill-the-owner test children, the
// ingress benchmark and its load workers): `--import <this file>`.
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
