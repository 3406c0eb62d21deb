// This machine's own ledger of what it sent through a context (`contexts/<context>/ledger` under
// the state root, one hash chain per context, written by every process that calls through it):
// each action with who called (the model, or the user through the CLI, Pi or a library), the
// instance, the arguments as an instance's ledger keeps them (secret values never: names only), the
// outcome and how long it took; what the user was asked for it and answered; and the model's calls
// refused here (by the model guard or the user's no), which never reach the other machine. The far
// side keeps its own ledger of what it ran.
import { traceMark } from "../trace.js";
import { mkdirSync } from "node:fs";
import { hostname, userInfo } from "node:os";
import { dirname } from "node:path";
import { isControllerError } from "../errors.js";
import { StateLayout } from "../state/layout.js";
import { appendShared, type LedgerKind } from "../state/ledger.js";
import { recordedArgs } from "../state/ledger-args.js";
import type { Caller, TrustNote } from "../wire.js";

/** How a call through a context ended, as the ledger says it: `ok`, its error code, or `interrupted` (Ctrl-C). */
export type ContextOutcome = "ok" | "interrupted" | string;

/** One call through a context, as this machine saw it. */
export interface ContextCall {
  context: string;
  /** The validated action. */
  args: Record<string, unknown>;
  caller: Caller;
  /** What the user was asked for it here, and answered. */
  trust: readonly TrustNote[];
  outcome: ContextOutcome;
  ms: number;
}

/** This machine as the far side's ledger names it: `user@host`. */
export function laptopIdentity(): string {
  let user = process.env.USER ?? "";
  try {
    user = userInfo().username;
  } catch {
    // No passwd entry for this uid: the environment's name, or none.
  }
  return `${user || "?"}@${hostname()}`;
}

/**
 * Calls made over and over while a page or a follower is open, which change nothing the ledger
 * tells: the dashboard's list of every context and its `egress-watch` (and `egress` of what
 * waits), `audit` itself, `logs -f` and `exec-status` while the command runs (its end, the exit
 * code, is recorded). The far side does not record them either.
 */
function isPoll(args: Record<string, unknown>, outcome: ContextOutcome, result: unknown): boolean {
  switch (args.action) {
    case "list":
    case "audit":
    case "audit-verify":
    case "egress-watch":
      return true;
    case "egress":
      return args.waiting === true;
    case "logs":
      return args.cursor !== undefined;
    case "exec-status":
      return outcome === "ok" && (result as { running?: unknown } | null)?.running === true;
    default:
      return false;
  }
}

/** The outcome of a call that threw: its code, or `interrupted` when the caller stopped waiting. */
export function outcomeOf(error: unknown, signal?: AbortSignal): ContextOutcome {
  if (signal?.aborted) return "interrupted";
  return isControllerError(error) ? error.code : "CONTROLLER_INTERNAL";
}

/**
 * Appends `call` to the context's ledger here (its trust notes first, then the action). Never
 * throws: the call has happened (or been refused) whether or not this machine could write it down.
 */
export function recordContextCall(env: NodeJS.ProcessEnv, call: ContextCall, result?: unknown): void {
  if (isPoll(call.args, call.outcome, result)) return;
  const layout = StateLayout.fromEnv(env);
  const name = typeof call.args.name === "string" ? { name: call.args.name } : {};
  const action = String(call.args.action);
  const dir = layout.contextLedgerDir(call.context);
  try {
    mkdirSync(dirname(dir), { recursive: true, mode: 0o700 });
    appendShared(dir, [
      ...call.trust.map((note) => ({
        kind: "trust" as LedgerKind,
        data: { action, ...name, context: call.context, ...note },
      })),
      {
        kind: "action",
        data: {
          action,
          ...name,
          caller: call.caller,
          context: call.context,
          args: recordedArgs(call.args),
          outcome: call.outcome,
          ms: Math.round(call.ms),
        },
      },
    ]);
  } catch {
    // Not written (a state root that cannot be written): see above.
  }
}

/**
 * Runs `send` (a call through the context, or one done here for it such as `apply`) and records
 * how it ended, with its duration; resolves or rejects as `send` does.
 */
export async function recordedContextCall<T>(
  env: NodeJS.ProcessEnv,
  call: Omit<ContextCall, "outcome" | "ms">,
  send: () => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  const started = performance.now();
  const ms = () => performance.now() - started;
  try {
    const result = await send();
    recordContextCall(env, { ...call, outcome: "ok", ms: ms() }, result);
    traceMark("context: recorded");
    return result;
  } catch (error) {
    recordContextCall(env, { ...call, outcome: outcomeOf(error, signal), ms: ms() });
    throw error;
  }
}
