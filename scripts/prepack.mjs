// `prepack` of every publishable package: builds the package and the workspace packages it
// depends on (through Nx, so an unchanged build comes from the cache), and puts the repository's
// LICENSE next to its package.json, where npm picks it up. A clean checkout therefore never packs
// an empty dist/. Run from the package directory (npm does that for lifecycle scripts).
import { execFileSync } from "node:child_process";
import { copyFileSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const { name } = JSON.parse(readFileSync("package.json", "utf8"));
execFileSync(join(root, "node_modules", ".bin", "nx"), ["run", `${name}:build`, "--outputStyle=static"], {
  cwd: root,
  // npm reads a pack's result from stdout (`npm pack --json`): the build's own output goes to stderr.
  stdio: ["ignore", 2, 2],
  env: { ...process.env, NX_DAEMON: "false", NX_NO_CLOUD: "true" },
});
copyFileSync(join(root, "LICENSE"), "LICENSE");
