// The guest's editable copy of the config, `<workspace>/.sandbox.yaml`: read through the agent
// (bounded like a host YAML) and validated with the same rules as the host's file.

import { LIMITS, isConfigError, parseConfig, type SandboxConfig } from "@pi-sandbox/config";
import type { AgentChannel } from "./channel.js";
import { SupervisorError, isSupervisorError, messageOf } from "./errors.js";
import { readThroughAgent } from "./file-transfer.js";
import type { SupervisorLogger } from "./logger.js";

/** Name of the editable guest copy of the config, inside the workspace. */
export const GUEST_CONFIG_NAME = ".sandbox.yaml";

/** Guest path of the config copy in `workspace`. */
export function guestConfigPath(workspace: string): string {
  return `${workspace.replace(/\/+$/, "")}/${GUEST_CONFIG_NAME}`;
}

/**
 * Reads and validates the guest config at `path`: SUPERVISOR_GUEST_CONFIG_NOT_FOUND when it is
 * missing, SUPERVISOR_GUEST_CONFIG_INVALID (with every issue) when it does not pass.
 */
export async function readGuestConfigThroughAgent(
  channel: AgentChannel,
  path: string,
  signal: AbortSignal | undefined,
): Promise<SandboxConfig> {
  let text: string;
  try {
    const read = await readThroughAgent(channel, path, LIMITS.yamlMaxBytes + 1, false, signal);
    text = read.data.toString("utf8");
  } catch (error) {
    if (isSupervisorError(error, "FILE_NOT_FOUND")) {
      throw new SupervisorError("SUPERVISOR_GUEST_CONFIG_NOT_FOUND", `the guest has no ${path}`, {
        hint: "write one (write action) or recreate the instance",
        cause: error,
        details: { path },
      });
    }
    throw error;
  }
  try {
    return parseConfig(text, { sourcePath: path });
  } catch (error) {
    if (!isConfigError(error)) throw error;
    throw new SupervisorError("SUPERVISOR_GUEST_CONFIG_INVALID", error.message, {
      hint: error.hint ?? `fix ${path} in the guest and try again`,
      cause: error,
      details: { path, issues: error.issues },
    });
  }
}

/** What `read` gives, or undefined (logged) when the guest config is missing or invalid. */
export async function readGuestConfigOrNothing(
  read: () => Promise<SandboxConfig>,
  logger: SupervisorLogger,
): Promise<SandboxConfig | undefined> {
  try {
    return await read();
  } catch (error) {
    if (
      isSupervisorError(error, "SUPERVISOR_GUEST_CONFIG_NOT_FOUND") ||
      isSupervisorError(error, "SUPERVISOR_GUEST_CONFIG_INVALID")
    ) {
      logger.warn(`[supervisor] ${messageOf(error)}`);
      return undefined;
    }
    throw error;
  }
}
