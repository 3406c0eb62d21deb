// Which modules a fresh Node process loads: a child process runs the workspace's TypeScript
// sources (scripts/register-ts.mjs, the sources' export condition) with a loader hook that records
// every module's URL, and runs `script` (an ES module body; `load(path)` imports a source file
// relative to the package, `mark()` returns the URLs loaded so far). What it prints is returned.
import { execFile } from "node:child_process";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);

/** The package's directory (tests run from it). */
const PACKAGE = process.cwd();

/** Runs `script` in a fresh Node process that records its modules; resolves with its stdout. */
export async function inFreshProcess(script: string): Promise<string> {
  const prelude = `
import { registerHooks } from "node:module";
const loaded = [];
registerHooks({ load(url, context, next) { loaded.push(url); return next(url, context); } });
const base = ${JSON.stringify(pathToFileURL(PACKAGE + "/").href)};
const load = (path) => import(new URL(path, base).href);
const mark = () => loaded.filter((url) => !url.startsWith("node:"));
`;
  const { stdout } = await run(
    process.execPath,
    [
      "--conditions=@pi-sandbox/source",
      "--no-warnings",
      // Parameter properties and enums need more than stripping the types.
      "--experimental-transform-types",
      "--import",
      pathToFileURL(resolve(PACKAGE, "../../scripts/register-ts.mjs")).href,
      "--input-type=module",
      "--eval",
      prelude + script,
    ],
    { cwd: PACKAGE, maxBuffer: 16 * 1024 * 1024, timeout: 60_000 },
  );
  return stdout;
}

/** Paths (relative to the repository, or a package name under node_modules) of `urls`. */
export function shortPaths(urls: readonly string[]): string[] {
  const root = pathToFileURL(resolve(PACKAGE, "../..") + "/").href;
  return urls.map((url) => url.replace(root, ""));
}
