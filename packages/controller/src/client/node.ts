import { execFileSync } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";
import { ControllerError } from "../errors.js";

/** Oldest Node major the daemon runs on (Gondolin needs it). */
export const DAEMON_NODE_MAJOR = 24;

function majorOf(version: string): number {
  return Number.parseInt(version.replace(/^v/, "").split(".")[0] ?? "0", 10);
}

function versionOf(nodePath: string): string | undefined {
  try {
    return execFileSync(nodePath, ["--version"], { encoding: "utf8", timeout: 10_000 }).trim();
  } catch {
    return undefined;
  }
}

/**
 * Finds a Node ≥ 24 for the daemon: `$PI_SANDBOX_NODE`, then this process's own Node, then each
 * `node` on PATH. The client itself may run on an older Node (Pi needs only 22.19).
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
    if (version && majorOf(version) >= DAEMON_NODE_MAJOR) return candidate;
  }
  throw new ControllerError(
    "CONTROLLER_NODE_MISSING",
    `no Node.js ${DAEMON_NODE_MAJOR} or newer found to run the controller`,
    {
      hint: `Install Node.js ${DAEMON_NODE_MAJOR}+ and put it on PATH, or set PI_SANDBOX_NODE to its path.`,
      details: { tried },
    },
  );
}
