#!/usr/bin/env node
// The `pi-sandbox` command. This file is committed (dist/ is not) so that npm links the command
// even in a fresh checkout; before the first build it says how to build instead of failing oddly.
try {
  (await import("../dist/compile-cache.js")).enableOwnCompileCache();
  await import("../dist/cli/main.js");
} catch (error) {
  if (error?.code === "ERR_MODULE_NOT_FOUND" && /dist\/(cli\/main|compile-cache)\.js/.test(String(error.message))) {
    console.error(
      "pi-sandbox is not built in this checkout yet: run `npm run build` at the repository root, then retry.",
    );
    process.exit(1);
  }
  throw error;
}
