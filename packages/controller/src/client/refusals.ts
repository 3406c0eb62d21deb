// A model's call refused before it reached a daemon (the user's no in Pi's dialog, nobody there to
// ask, a host path a model may never read, an action for the user only) goes into the instance's
// ledger all the same: its daemon (started for it, as a call would) is sent the refusal, which it
// records and never runs. A name with no instance has no ledger to write to. A call for another
// machine refused here goes into this machine's ledger of the context instead: it never got there.
import { isControllerError, type ControllerErrorCode } from "../errors.js";
import type { EntryKind, StateLayout } from "../state/layout.js";
import { readRecord } from "../state/records.js";
import type { TrustNote } from "../wire.js";
import { recordContextCall } from "../remote/laptop-ledger.js";
import { callDaemon } from "./connection.js";
import { ensureDaemon } from "./spawn.js";

/** The refusals of a model's call the client makes, and who decides each one where nobody is asked. */
const REFUSALS: Partial<Record<ControllerErrorCode, string | undefined>> = {
  CONTROLLER_USER_DECLINED: undefined,
  CONTROLLER_CONFIRMATION_REQUIRED: undefined,
  CONTROLLER_HOST_PATH_REFUSED: "the controller: refused to a model whatever the user answers",
  CONTROLLER_USER_ONLY: "the controller: the action is for the user, never the model",
};

/** How long recording a refusal may hold up the refusal itself. */
const NOTE_TIMEOUT_MS = 10_000;

/**
 * Records `error` in the ledger of `args.name` when it is a refusal of a model's call, with what
 * the user was asked (`trust`); for a call through `context`, in this machine's ledger of it. `from`
 * is the machine a call came from over a context. Never throws: the refusal stands whether or not
 * it was recorded.
 */
export async function noteRefusal(
  layout: StateLayout,
  kind: EntryKind,
  args: Record<string, unknown>,
  error: unknown,
  trust: readonly TrustNote[],
  env: NodeJS.ProcessEnv,
  context?: string,
  from?: string,
): Promise<void> {
  if (!isControllerError(error) || !(error.code in REFUSALS)) return;
  const decider = REFUSALS[error.code];
  const notes: TrustNote[] =
    trust.length > 0 || decider === undefined ? [...trust] : [{ asked: [error.message], answer: "no", by: decider }];
  if (context) {
    recordContextCall(env, { context, args, caller: "model", trust: notes, outcome: error.code, ms: 0 });
    return;
  }
  if (typeof args.name !== "string") return;
  try {
    if (!(await readRecord(layout, kind, args.name))) return;
    const signal = AbortSignal.timeout(NOTE_TIMEOUT_MS);
    await ensureDaemon(layout, kind, args.name, { env, signal });
    await callDaemon(layout.socketPath(kind, args.name), args, {
      refused: error.code,
      trust: notes,
      signal,
      ...(from ? { from } : {}),
    });
  } catch {
    // Not recorded (the daemon would not start, an older one never answers and the wait ends):
    // the refusal stands all the same.
  }
}
