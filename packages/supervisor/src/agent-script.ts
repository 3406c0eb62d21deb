// Where the guest agent's zipapp is on the host, and building it from agent/ in a checkout.
import { execFile } from "node:child_process";
import { access, readdir, readFile, stat } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { SupervisorError } from "./errors.js";

// src/ and dist/ both sit one level below the package root.
const PACKAGE_ROOT = new URL("../", import.meta.url);
/** Builds the zipapp from agent/pi_sandbox_agent/; present in a checkout, not in the published package. */
const BUILDER = fileURLToPath(new URL("agent/build.py", PACKAGE_ROOT));
const BUILD_TIMEOUT_MS = 60_000;

let building: Promise<void> | undefined;

/** Absolute host path of the guest agent zipapp (`dist/agent/sandbox_agent.pyz`). */
export function agentArchivePath(): string {
  return fileURLToPath(new URL("dist/agent/sandbox_agent.pyz", PACKAGE_ROOT));
}

/**
 * The agent zipapp, built first when this is a checkout whose agent sources changed since the
 * last build (so tests never run a stale agent, even before `npm run build`). The published
 * package ships the archive and no sources, and is read as is.
 */
export async function readAgentArchive(): Promise<Buffer> {
  if ((await exists(BUILDER)) && (await sourcesNewer())) {
    building ??= runBuilder().finally(() => {
      building = undefined;
    });
    await building;
  }
  try {
    return await readFile(agentArchivePath());
  } catch (error) {
    throw new SupervisorError("AGENT_START_FAILED", `the guest agent archive ${agentArchivePath()} is missing`, {
      hint: 'run "npm run build" in @pi-sandbox/supervisor',
      cause: error,
    });
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * True when the archive is missing or a source (or the builder) changed after it was written; the
 * builder then decides by content. Spares each daemon start a python3 process (~0.5 s on a busy
 * host) when nothing changed, as make does.
 */
async function sourcesNewer(): Promise<boolean> {
  let built: number;
  try {
    built = (await stat(agentArchivePath())).mtimeMs;
  } catch {
    return true;
  }
  const dir = fileURLToPath(new URL("agent/pi_sandbox_agent/", PACKAGE_ROOT));
  const sources = (await readdir(dir)).filter((name) => name.endsWith(".py")).map((name) => dir + name);
  for (const path of [BUILDER, dir, ...sources]) {
    if ((await stat(path)).mtimeMs > built) return true;
  }
  return false;
}

/** Runs agent/build.py, which rebuilds only when the sources changed (and is safe to run concurrently). */
function runBuilder(): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile("python3", [BUILDER], { timeout: BUILD_TIMEOUT_MS }, (error, _stdout, stderr) => {
      // No python3 on this host: use the archive already built, if there is one.
      if (!error || (error as NodeJS.ErrnoException).code === "ENOENT") return resolve();
      reject(
        new SupervisorError(
          "AGENT_START_FAILED",
          `could not build the guest agent with python3 ${BUILDER}: ${stderr.trim() || error.message}`,
          { cause: error },
        ),
      );
    });
  });
}
