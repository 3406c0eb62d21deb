// The built CLI run as a process, as a user runs it, against a private state root in a temp
// directory that the calling test file gets and removes (beforeAll/afterAll).
import { spawnSync, type SpawnSyncReturns } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** dist/cli/main.js of this package. */
export const CLI = fileURLToPath(new URL("../../dist/cli/main.js", import.meta.url));

/** `pi-sandbox <args>` run to its end, against the test file's state root. */
export type CliRun = (...args: string[]) => SpawnSyncReturns<string>;

/**
 * Registers the hooks of a temp directory (the state root is its `state/`) and returns a runner of
 * the CLI against it, and the directory for the test's own files.
 */
export function cliProcess(prefix: string): { cli: CliRun; dir: () => string } {
  let home = "";
  beforeAll(async () => {
    home = await mkdtemp(join(tmpdir(), prefix));
  });
  afterAll(async () => {
    await rm(home, { recursive: true, force: true });
  });
  const cli: CliRun = (...args) =>
    spawnSync(process.execPath, [CLI, ...args], {
      encoding: "utf8",
      env: { ...process.env, PI_SANDBOX_HOME: join(home, "state") },
    });
  return { cli, dir: () => home };
}
