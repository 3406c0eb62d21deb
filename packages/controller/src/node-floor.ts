// The Node floors of the CLI/daemon and the client, and finding a Node new enough to run a daemon.
import { execFileSync } from "node:child_process";
import { accessSync, constants, readFileSync } from "node:fs";
import { delimiter, join } from "node:path";
import { ControllerError } from "./errors.js";

/** The Node floors of package.json's `piSandbox.nodeFloor`, the one place they are stated. */
interface NodeFloors {
  /** The CLI and the daemon: what Gondolin needs (its own `engines`). */
  cli: string;
  /** What Pi loads (`./client`, the Pi package): what Pi needs. */
  pi: string;
}

/** The Node floors, read from this package's package.json (src and dist alike). */
export const NODE_FLOORS: NodeFloors = (
  JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
    piSandbox: { nodeFloor: NodeFloors };
  }
).piSandbox.nodeFloor;

/** True when Node `version` (`v24.1.0` or `24.1.0`) is older than `floor` (`23.6.0`). */
export function isOlderNode(version: string, floor: string): boolean {
  const a = version.replace(/^v/, "").split(".").map(Number);
  const b = floor.split(".").map(Number);
  for (let i = 0; i < 3; i += 1) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) < (b[i] ?? 0);
  return false;
}

function versionOf(nodePath: string): string | undefined {
  try {
    return execFileSync(nodePath, ["--version"], { encoding: "utf8", timeout: 10_000 }).trim();
  } catch {
    return undefined;
  }
}

/**
 * Finds a Node at or above the CLI floor for the daemon: `$PI_SANDBOX_NODE`, then this process's
 * own Node, then each `node` on PATH. The client itself may run on an older Node (Pi's floor).
 */
export function findDaemonNode(env: NodeJS.ProcessEnv = process.env): string {
  const tried: string[] = [];
  const candidates: string[] = [];
  if (env.PI_SANDBOX_NODE) candidates.push(env.PI_SANDBOX_NODE);
  candidates.push(process.execPath);
  for (const dir of (env.PATH ?? "").split(delimiter)) if (dir) candidates.push(join(dir, "node"));
  for (const candidate of candidates) {
    if (tried.includes(candidate)) continue;
    try {
      accessSync(candidate, constants.X_OK);
    } catch {
      continue;
    }
    const version = candidate === process.execPath ? process.version : versionOf(candidate);
    tried.push(`${candidate} (${version ?? "unusable"})`);
    if (version && !isOlderNode(version, NODE_FLOORS.cli)) return candidate;
  }
  throw new ControllerError(
    "CONTROLLER_NODE_MISSING",
    `no Node.js ${NODE_FLOORS.cli} or newer found to run the controller`,
    {
      hint: `Install Node.js 24 LTS (https://nodejs.org, or \`nvm install 24\`) and put it on PATH, or set PI_SANDBOX_NODE to its path.`,
      details: { tried },
    },
  );
}
