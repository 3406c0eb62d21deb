// Setup and resume runs through the agent: the requests, their deadlines, and the replies
// checked like an exec's. The client (client.ts) supplies the commands of the guest YAML when the
// caller gives none.

import { LIMITS } from "@pi-sandbox/config";
import { checkWait, toExecResult } from "./call-args.js";
import type { AgentChannel } from "./channel.js";
import { parseExec, parseSetupExtras } from "./replies.js";
import { type ResumeOptions, type SetupOptions, REPLY_MARGIN_MS } from "./options.js";
import type { ResumeResult, SetupResult } from "./types.js";

/** The guest YAML's commands of a run, when the caller gave none (undefined: none there either). */
type GuestCommands = (signal: AbortSignal | undefined) => Promise<readonly string[] | undefined>;

/** See `SupervisorClient.runSetup`. */
export async function runSetupThroughAgent(
  channel: AgentChannel,
  options: SetupOptions,
  guestCommands: GuestCommands,
): Promise<SetupResult> {
  const deadlineMs = checkWait(options.deadlineMs ?? LIMITS.setupDeadlineMs, "deadlineMs", LIMITS.setupDeadlineMs);
  const commands = options.commands ?? (await guestCommands(options.signal)) ?? [];
  const raw = await channel.request(
    "run-setup",
    { commands, deadlineMs },
    (result) => ({ ...parseExec(result, { keep: "tail", commands }), ...parseSetupExtras(result) }),
    {
      signal: options.signal,
      timeoutMs: deadlineMs + 2 * REPLY_MARGIN_MS,
      onAbort: () => void channel.request("run-cancel", { kind: "setup" }, () => undefined).catch(() => undefined),
    },
  );
  return {
    ok: raw.ok,
    handle: raw.handle,
    exitCode: raw.exitCode ?? -1,
    ...(raw.signal === undefined ? {} : { signal: raw.signal }),
    timedOut: raw.timedOut,
    steps: raw.steps ?? [],
    output: raw.output,
    truncatedBytes: raw.truncatedBytes,
    cleanup: raw.cleanup,
    logPath: raw.logPath,
    durationMs: raw.durationMs ?? 0,
  };
}

/** See `SupervisorClient.runResume`. */
export async function runResumeThroughAgent(
  channel: AgentChannel,
  options: ResumeOptions,
  guestCommands: GuestCommands,
): Promise<ResumeResult> {
  const waitMs = checkWait(options.waitMs ?? LIMITS.resumeWaitMs, "waitMs");
  const commands = options.commands ?? (await guestCommands(options.signal)) ?? [];
  const raw = await channel.request("run-resume", { commands, waitMs }, (result) => parseExec(result, { commands }), {
    signal: options.signal,
    timeoutMs: waitMs + REPLY_MARGIN_MS,
  });
  return { ...toExecResult(raw), steps: raw.steps ?? [] };
}
