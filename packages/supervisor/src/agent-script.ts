import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";

/** Absolute host path of the guest agent shipped with this package (`agent/sandbox_agent.py`). */
export function agentScriptPath(): string {
  // src/ and dist/ both sit one level below the package root, next to agent/.
  return fileURLToPath(new URL("../agent/sandbox_agent.py", import.meta.url));
}

/** The agent's source, read from {@link agentScriptPath}. */
export async function readAgentScript(): Promise<Buffer> {
  return readFile(agentScriptPath());
}
