// `prepack` of every publishable package: builds the package and the workspace packages it
// depends on (through Nx, so an unchanged build comes from the cache), and puts the repository's
// LICENSE next to its package.json, where npm picks it up. A clean checkout therefore never packs
// an empty dist/. Run from the package directory (npm does that for lifecycle scripts).
//
// Inside `npm test` (scripts/test.mjs sets PI_SANDBOX_WORKSPACE_BUILT once every project is
// built), the packs that tests make skip the build: with no Nx daemon, Nx takes an unchanged build
// "from the local cache" by rewriting its dist/ folders, and a suite running in the other lane
// failed importing a package whose dist/ was gone at that moment.
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const { name } = JSON.parse(readFileSync("package.json", "utf8"));
if (process.env.PI_SANDBOX_WORKSPACE_BUILT !== "1" || !existsSync("dist")) {
  execFileSync(join(root, "node_modules", ".bin", "nx"), ["run", `${name}:build`, "--outputStyle=static"], {
    cwd: root,
    // npm reads a pack's result from stdout (`npm pack --json`): the build's own output goes to stderr.
    stdio: ["ignore", 2, 2],
    env: { ...process.env, NX_DAEMON: "false", NX_NO_CLOUD: "true" },
  });
}
copyFileSync(join(root, "LICENSE"), "LICENSE");
