#!/usr/bin/env node
// The `pi-sandbox` command. This file is committed (dist/ is not) so that npm links the command
// even in a fresh checkout; before the first build it says how to build instead of failing oddly.
// It is written for old Node too (no top-level await, no newer syntax): a Node below the CLI's
// floor (package.json "piSandbox.nodeFloor.cli", Gondolin's own floor) gets one line saying what
// was found, what is needed and where to get it, not a stack trace from a modern import.
import { readFileSync } from "node:fs";

function older(found, needed) {
  const a = found.split(".").map(Number);
  const b = needed.split(".").map(Number);
  for (let i = 0; i < 3; i += 1) if ((a[i] || 0) !== (b[i] || 0)) return (a[i] || 0) < (b[i] || 0);
  return false;
}

const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
const floor = manifest.piSandbox.nodeFloor.cli;
if (older(process.versions.node, floor)) {
  console.error(
    "pi-sandbox needs Node.js " +
      floor +
      " or newer, but " +
      process.execPath +
      " is Node.js " +
      process.versions.node +
      ": install Node.js 24 LTS (https://nodejs.org, or `nvm install 24`) and run it with that.",
  );
  process.exit(1);
}

import("../dist/compile-cache.js")
  .then((cache) => {
    cache.enableOwnCompileCache();
    return import("../dist/cli/main.js");
  })
  .catch((error) => {
    if (
      error &&
      error.code === "ERR_MODULE_NOT_FOUND" &&
      /dist\/(cli\/main|compile-cache)\.js/.test(String(error.message))
    ) {
      console.error(
        "pi-sandbox is not built in this checkout yet: run `npm run build` at the repository root, then retry.",
      );
      process.exit(1);
    }
    throw error;
  });
