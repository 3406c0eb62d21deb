// The agent step: the guest's isolated Pi agent directory, and Herdr's Pi integration in it when
// Herdr is on the guest's PATH (`herdr integration install pi` writes an extension there, which
// the launch command's Pi discovers). Herdr is optional: a failure is reported, not fatal.
import { shellQuote } from "@pi-sandbox/config";
import { mustSucceed } from "./candidate.js";
import type { GuestSession } from "./guest.js";
import type { ReviewLayout } from "./layout.js";

/** The command the agent step runs in the guest when Herdr is there. */
export const HERDR_COMMAND = "herdr integration install pi";

/** Bytes of a failed Herdr command's output the note quotes (its log keeps all of it). */
const HERDR_OUTPUT_BYTES = 1500;

/** What the agent step found about Herdr, as the summary's note says it. */
export interface AgentDirResult {
  /** `absent`, `installed`, or `failed` (then `note` holds the command, exit code and output). */
  herdr: "absent" | "installed" | "failed";
  /** One line for the summary. */
  note: string;
}

/**
 * Makes `<review>/agent` (0700) and, with Herdr on the guest's PATH, runs `herdr integration
 * install pi` with `PI_CODING_AGENT_DIR` set to it, its output in `logPath`.
 */
export async function prepareAgentDir(
  guest: GuestSession,
  layout: ReviewLayout,
  logPath: string,
  signal?: AbortSignal,
): Promise<AgentDirResult> {
  const dir = shellQuote(layout.agentDir);
  const log = shellQuote(logPath);
  const result = await mustSucceed(
    guest,
    "agent",
    `umask 077 && mkdir -p ${dir} && chmod 700 ${dir} && ` +
      `if command -v herdr >/dev/null 2>&1; then ` +
      `if PI_CODING_AGENT_DIR=${dir} ${HERDR_COMMAND} > ${log} 2>&1; then echo herdr:installed; ` +
      `else echo "herdr:failed:$?"; tail -c ${HERDR_OUTPUT_BYTES} ${log}; fi; else echo herdr:absent; fi`,
    signal,
  );
  if (result.output.includes("herdr:installed")) {
    return { herdr: "installed", note: "Herdr found: its Pi integration is installed in the agent directory." };
  }
  const failed = /herdr:failed:(\d+)\n?([\s\S]*)$/.exec(result.output);
  if (failed) {
    const output = failed[2]!.trim().replace(/\s*\n\s*/g, " | ");
    return {
      herdr: "failed",
      note:
        `Herdr found but \`PI_CODING_AGENT_DIR=${layout.agentDir} ${HERDR_COMMAND}\` failed (exit ${failed[1]}; log: ${logPath}): ` +
        (output || "(no output)"),
    };
  }
  return { herdr: "absent", note: "Herdr not found in the guest: its Pi integration was skipped (optional)." };
}
