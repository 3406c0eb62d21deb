// The thin client: validates actions, answers local ones from state files, and talks to (or
// spawns) the per-instance daemon for the rest. No Gondolin, no QEMU: importable from Node 22.

import { resolve } from "node:path";
import { hostPathArgs, type ActionSpec } from "../actions/kit/define.js";
import { renderActionHelp } from "../actions/kit/help.js";
import { ACTIONS, type ActionInput, type ActionName, type ActionResult } from "../actions/kit/registry.js";
import { validateAction } from "../actions/kit/validate.js";
import { ControllerError, isControllerError } from "../errors.js";
import { notFound } from "../state/inspect.js";
import { StateLayout, type EntryKind } from "../state/layout.js";
import { readRecord } from "../state/records.js";
import { suspendedByIdle } from "../state/waker-call.js";
import type { Caller, ProgressEvent, TrustNote } from "../wire.js";
import type { HostGuard } from "../host-guard.js";
import { callDaemon } from "./connection.js";
import { guardModelCall, type ConfirmFn } from "./model-guard.js";
import { noteRefusal } from "./refusals.js";
import { ensureDaemon } from "./spawn.js";
import { callThroughContext, runsRemotely } from "../remote/route.js";
import { recordedContextCall } from "../remote/laptop-ledger.js";
import { runHereForContext, runsHereForContext } from "./context-here.js";
import { selectContext } from "../state/contexts.js";

// Errors
export { ControllerError, isControllerError } from "../errors.js";
export type { ControllerErrorCode, ControllerErrorJson, ControllerErrorOptions } from "../errors.js";
export { CodedError, isCodedError, brandError, hasBrand } from "@pi-sandbox/config";
export type { CodedErrorJson, CodedErrorOptions } from "@pi-sandbox/config";
// Actions and help
export { ACTIONS, findAction, findCliAction } from "../actions/kit/registry.js";
export type { ActionName, ActionInput, ActionResult } from "../actions/kit/registry.js";
export type {
  ActionSpec,
  ArgumentDoc,
  ActionRoute,
  CliMapping,
  DaemonContext,
  LocalContext,
} from "../actions/kit/define.js";
export { validateAction } from "../actions/kit/validate.js";
export type { ValidatedAction } from "../actions/kit/validate.js";
export type { ExecView } from "../actions/exec.js";
export type { ControllerLogTail, ServiceLogRead } from "../actions/logs.js";
export type { CopyResult } from "../actions/copy-tree.js";
export { entryLine as ledgerEntryLine } from "../actions/audit.js";
export type { AuditRead, AuditVerdict } from "../actions/audit.js";
export type { LedgerEntry, LedgerKind } from "../state/ledger.js";
export type { EgressTally, EgressView } from "../actions/egress.js";
export type { EgressAnswer, EgressAnswered } from "../actions/kit/context.js";
// Egress approvals: who can answer an instance's waiting requests, and what waits
export {
  ANSWERER_FRESH_MS,
  dropAnswerer as dropEgressAnswerer,
  markAnswerer as markEgressAnswerer,
  readAsks as readEgressAsks,
} from "../state/egress.js";
export type { EgressAnswerer, EgressAsk, EgressGrant } from "../state/egress.js";
export type { CheckpointTaken, CheckpointView, ForkResult } from "../actions/kit/context.js";
export type { ServicesView } from "../actions/kit/context.js";
export type { DashboardInfo } from "../dashboard/launch.js";
export type { DashboardAbsent, DashboardStopped } from "../actions/dashboard.js";
// State views
export { StateLayout, resolveStateRoot } from "../state/layout.js";
export type { EntryKind } from "../state/layout.js";
export type { EntryView } from "../state/inspect.js";
export type { EntryState, PreviewLinkInfo, RecordedError } from "../state/records.js";
export type { ProgressEvent } from "../wire.js";
export type { DoctorCheck } from "../actions/doctor-checks.js";
export type { ConfirmFn, ConfirmRequest } from "./model-guard.js";
export type { ConcernKind, HostConcern } from "../host-guard.js";
// Printing guest text: results carry it as the guest wrote it; escape before a terminal sees it
export { escapeControlChars, hasControlChars } from "@pi-sandbox/config";
export type { ControlCharOptions } from "@pi-sandbox/config";

/** Help for models and humans: every action's arguments, the sandbox.yaml keys, profiles and limits. */
export function renderHelp(options: { includeUserOnly?: boolean } = {}): string {
  return renderActionHelp(ACTIONS, options);
}

/** Options of `callAction`. */
export interface CallActionOptions {
  /** Base for relative `config` paths; default `process.cwd()`. */
  cwd?: string;
  /** Environment for state-root resolution and the daemon; default `process.env`. */
  env?: NodeJS.ProcessEnv;
  /** Ends the wait with `signal.reason`; work already sent to a daemon continues. */
  signal?: AbortSignal;
  /** Progress of long actions (boot stages, setup output). */
  onProgress?: (event: ProgressEvent) => void;
  /**
   * `model`: refused user-only actions such as `shell`; its host paths are resolved through
   * symlinks and confined to `cwd` (the project), and whatever it may not do alone (read or write
   * outside the project, write where code runs, give a file an exec bit, create from a config
   * declaring secrets or mounts the user has not trusted) needs `confirm`. Default `user`: no limits.
   */
  caller?: "user" | "model";
  /** For a model: asks the user (never the model) to allow one call; absent = such calls are refused. */
  confirm?: ConfirmFn;
  /** For a model: every host path needs `confirm` (Pi's tools are attached to an instance). */
  attached?: boolean;
  /** For the user: what they use (`cli`, `dashboard`, Pi's `/sandbox`); the ledger says so. Default `library`. */
  via?: "cli" | "dashboard" | "pi";
  /** The context (machine) to run on; default `PI_SANDBOX_CONTEXT`, else `pi-sandbox context use`'s, else local. */
  context?: string;
  /**
   * Set by `system dial-stdio`: the call came over a context from machine `from` (`user@host`),
   * made there by `caller`. The ledger records both; a model's call is refused a user-only action.
   */
  relayed?: { caller: Caller; from: string };
}

function entryKindOf(args: Record<string, unknown>): EntryKind {
  if (args.action === "prepare") return "templates";
  return (args.kind as EntryKind | undefined) ?? "instances";
}

/** Host path arguments made absolute against `cwd`; a trailing `/` (into a directory) is kept. */
function resolveHostPaths(cwd: string, value: unknown): unknown {
  const one = (path: string) => {
    const absolute = resolve(cwd, path);
    return path.endsWith("/") && !absolute.endsWith("/") ? `${absolute}/` : absolute;
  };
  if (typeof value === "string") return one(value);
  return Array.isArray(value) ? value.map((path) => (typeof path === "string" ? one(path) : path)) : value;
}

/**
 * Runs one action (a JSON string or an object) and resolves with its JSON-safe result, typed by
 * the action when the input names it. Throws `ControllerError` with a code, message and hint.
 */
export async function callAction<N extends ActionName>(
  input: ActionInput<N> & { action: N },
  options?: CallActionOptions,
): Promise<ActionResult<N>>;
export async function callAction(input: unknown, options?: CallActionOptions): Promise<unknown>;
export async function callAction(input: unknown, options: CallActionOptions = {}): Promise<unknown> {
  const env = options.env ?? process.env;
  const cwd = options.cwd ?? process.cwd();
  const { spec, args } = validateAction(input);
  const layout = StateLayout.fromEnv(env);
  // Another machine's: the action runs there, with what stays here done here (remote/route.ts).
  const context = runsRemotely(spec) ? await selectContext(options.context, env) : undefined;
  // What the user is asked for this call goes with it into the instance's ledger, and so does a
  // model's call refused here (into this machine's ledger of the context, for another machine's).
  const trust: TrustNote[] = [];
  const refuse = async (error: unknown): Promise<never> => {
    await noteRefusal(layout, entryKindOf(args), args, error, trust, env, context?.name, options.relayed?.from);
    throw error;
  };
  if (spec.userOnly && (options.caller === "model" || options.relayed?.caller === "model")) {
    await refuse(
      new ControllerError("CONTROLLER_USER_ONLY", `${spec.name} is for the user, not the model`, {
        hint: `Ask the user to type /sandbox ${String(args.name ?? "<name>")} in Pi, or run pi-sandbox ssh ${String(args.name ?? "<name>")}.`,
      }),
    );
  }
  const hostPaths = hostPathArgs(spec);
  for (const { name } of hostPaths) args[name] = resolveHostPaths(cwd, args[name]);
  const caller: Caller = options.relayed?.caller ?? (options.caller === "model" ? "model" : (options.via ?? "library"));
  const guarded =
    options.caller === "model" && (hostPaths.length > 0 || spec.irreversible)
      ? await guardModelCall(
          spec,
          args,
          { cwd, strict: options.attached === true, confirm: options.confirm, answered: (note) => trust.push(note) },
          layout,
          env,
        ).catch(refuse)
      : undefined;
  const local = {
    layout,
    cwd,
    env,
    actions: ACTIONS as readonly ActionSpec[],
    ...(options.onProgress ? { progress: options.onProgress } : {}),
  };
  if (context) {
    const remote = { env, caller, trust, model: options.caller === "model" };
    const through = { ...remote, signal: options.signal, onProgress: options.onProgress };
    // The dashboard and apply: here, with what they need from there (client/context-here.ts).
    if (runsHereForContext(spec)) {
      const here = () => runHereForContext(spec, args, context, { local, remote: through, guarded });
      // apply acts on that machine's instance: this machine's ledger of the context records it too.
      if (spec.name !== "apply") return here();
      return recordedContextCall(env, { context: context.name, args, caller, trust }, here, options.signal);
    }
    return callThroughContext(spec, args, context, through);
  }
  if (spec.route === "local") return spec.run(args, local);
  const answered = spec.runLocally?.(args, local);
  if (answered) return answered;
  await layout.ensurePrivate();
  for (;;) {
    try {
      const result = await routeToDaemon(layout, spec.route, args, {
        ...options,
        env,
        guard: guarded?.guard,
        ledger: { caller, trust, ...(options.relayed ? { from: options.relayed.from } : {}) },
      });
      const starts = spec.startsAfter?.(result as never, args as never) ?? [];
      return starts.length > 0 ? await startAfter(result, starts, options) : result;
    } catch (error) {
      // No daemon answers for a name with no record: the instance does not exist, it is not stopped.
      if (isControllerError(error) && error.code === "CONTROLLER_NOT_RUNNING" && typeof args.name === "string") {
        const kind = entryKindOf(args);
        if (!(await readRecord(layout, kind, args.name))) throw notFound(kind, args.name);
      }
      // A download whose plan needs the user's yes: asked once, then sent again with the answer.
      if (!(await guarded?.askAgain(error).catch(refuse))) throw error;
    }
  }
}

/**
 * Starts `names` in parallel (each in its own daemon) after an action made them, their progress
 * prefixed with the name; the views come back as the result's `started`. A start that fails fails
 * the call once all have ended, naming what was made and how to start it.
 */
async function startAfter(result: unknown, names: readonly string[], options: CallActionOptions): Promise<unknown> {
  const { onProgress } = options;
  const outcomes = await Promise.allSettled(
    names.map((name) =>
      callAction(
        { action: "start", name },
        {
          ...options,
          // The user asked for the first action; its starts are the controller's own.
          caller: "user",
          ...(onProgress
            ? { onProgress: (e: ProgressEvent) => onProgress({ ...e, message: `${name}: ${e.message}` }) }
            : {}),
        },
      ),
    ),
  );
  const failed = outcomes.flatMap((o, i) =>
    o.status === "rejected" ? [{ name: names[i]!, error: o.reason as unknown }] : [],
  );
  if (failed.length > 0) {
    const first = failed[0]!.error;
    const e = isControllerError(first) ? first : undefined;
    throw new ControllerError(
      e?.code ?? "CONTROLLER_INTERNAL",
      `${failed.map((f) => f.name).join(", ")} ${failed.length === 1 ? "was" : "were"} made but did not start: ${e?.message ?? String(first)}`,
      {
        hint: `${e?.hint ? `${e.hint} ` : ""}Start ${failed.length === 1 ? "it" : "them"} again with {"action":"start","name":"${failed[0]!.name}"}, or destroy ${failed.length === 1 ? "it" : "them"}.`,
        details: { made: names, failed: failed.map((f) => f.name), result },
        cause: first,
      },
    );
  }
  return {
    ...(result as object),
    started: outcomes.map((o) => (o as PromiseFulfilledResult<unknown>).value),
  };
}

/** Sends a daemon action to its entry's daemon, spawning one first for `spawn` actions. */
async function routeToDaemon(
  layout: StateLayout,
  route: "daemon" | "spawn",
  args: Record<string, unknown>,
  options: CallActionOptions & {
    env: NodeJS.ProcessEnv;
    guard?: HostGuard;
    ledger?: { caller: Caller; trust: TrustNote[]; from?: string };
  },
): Promise<unknown> {
  const kind = entryKindOf(args);
  const name = args.name as string;
  layout.entryDir(kind, name);
  const socketPath = layout.socketPath(kind, name);
  const { env } = options;
  const daemonOptions = {
    signal: options.signal,
    onProgress: options.onProgress,
    guard: options.guard,
    ...(options.ledger ? { caller: options.ledger.caller, trust: options.ledger.trust } : {}),
    ...(options.ledger?.from ? { from: options.ledger.from } : {}),
  };
  if (route !== "spawn") {
    try {
      return await callDaemon(socketPath, args, daemonOptions);
    } catch (error) {
      // An instance that suspended itself may be parked (its daemon exited, the waker holds its
      // previews): an action on it starts a daemon, as a start does, which resumes it.
      const parked =
        kind === "instances" &&
        isControllerError(error) &&
        ["CONTROLLER_DAEMON_EXITING", "CONTROLLER_NOT_RUNNING"].includes(error.code) &&
        (await suspendedByIdle(layout, name));
      if (!parked) throw error;
    }
  }
  // A daemon that just finished a stop may still answer its socket for a moment; one that is
  // exiting refuses new work, and a fresh one is spawned for it.
  for (let attempt = 0; ; attempt++) {
    await ensureDaemon(layout, kind, name, { env, signal: options.signal });
    try {
      return await callDaemon(socketPath, args, daemonOptions);
    } catch (error) {
      const retry =
        isControllerError(error) && ["CONTROLLER_DAEMON_EXITING", "CONTROLLER_NOT_RUNNING"].includes(error.code);
      if (!retry || attempt >= 3) throw error;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}
