// Every `pi-sandbox` command is a new Node process that compiles the CLI's ~180 modules. Node can
// keep the compiled code on disk: measured, `pi-sandbox --version` went from 120 to 90 ms. The
// cache lives in the user's own cache directory, not the shared temp dir where another user could
// plant it. The daemons do without: it saved them only 30-60 ms of start-up and cost 5 MiB of
// resident memory for their lifetime.
import { enableCompileCache } from "node:module";
import { homedir } from "node:os";
import { join } from "node:path";

/** Turns Node's on-disk compile cache on for modules loaded from now on. Never throws. */
export function enableOwnCompileCache(env: NodeJS.ProcessEnv = process.env): void {
  try {
    const cacheHome = env.XDG_CACHE_HOME || join(homedir(), ".cache");
    enableCompileCache?.(join(cacheHome, "pi-sandbox", "node-compile-cache"));
  } catch {
    // Only speed is lost.
  }
}
