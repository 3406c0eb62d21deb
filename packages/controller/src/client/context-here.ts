// Actions that name another context but do their work on this machine. `dashboard`: this
// machine's dashboard, which lists every context's instances and acts on them through their
// context, opened at that context's group. `apply`: the guest's patch comes through the context
// (its `diff`), and is checked and applied here, to this machine's directory, under the same rules
// as a local apply (a model's paths confined to its project, a yes for paths where code runs).

import type { ActionSpec, LocalContext } from "../actions/kit/define.js";
import { findAction } from "../actions/kit/registry.js";
import { applyPatch } from "../actions/patch-apply.js";
import { parsePatch } from "../actions/patch-parse.js";
import type { ApplyResult, WorkspaceDiff } from "../actions/workspace-patch.js";
import type { DashboardInfo } from "../dashboard/launch.js";
import { ControllerError, isControllerError } from "../errors.js";
import { hostPlaces } from "../host-places.js";
import { callThroughContext, type RemoteCallOptions } from "../remote/route.js";
import type { SshTarget } from "../state/contexts.js";
import type { GuardedCall } from "./model-guard.js";

/** The actions {@link runHereForContext} runs. */
const HERE_FOR_CONTEXT = new Set(["dashboard", "apply"]);

/** True when `spec` names a context but runs here ({@link runHereForContext}). */
export function runsHereForContext(spec: Pick<ActionSpec, "name">): boolean {
  return HERE_FOR_CONTEXT.has(spec.name);
}

/** What {@link runHereForContext} needs from the client. */
export interface HereOptions {
  /** What a local action gets. */
  local: LocalContext;
  /** What a call through the context gets. */
  remote: RemoteCallOptions;
  /** A model's call: its host limits, and the user's yes for what the apply writes. */
  guarded?: GuardedCall | undefined;
  /** Sends an action through the context; `callThroughContext` by default (tests pass another far side). */
  send?: (spec: ActionSpec, args: Record<string, unknown>) => Promise<unknown>;
}

/** Runs `dashboard` or `apply` (see {@link runsHereForContext}) for context `context`. */
export async function runHereForContext(
  spec: ActionSpec,
  args: Record<string, unknown>,
  context: SshTarget & { name: string },
  options: HereOptions,
): Promise<unknown> {
  if (spec.name === "dashboard" && spec.route === "local") {
    const result = (await spec.run(args as never, options.local)) as Partial<DashboardInfo>;
    // The link opens at the context's group (a fragment: the server never sees it).
    return typeof result.url === "string" ? { ...result, url: `${result.url}#context-${context.name}` } : result;
  }
  return applyHere(args as unknown as ApplyArgs, context, options);
}

/** `apply`'s validated arguments (`to` made absolute by the client). */
interface ApplyArgs {
  name: string;
  since?: string;
  path?: string;
  to: string;
  force?: boolean;
}

async function applyHere(
  args: ApplyArgs,
  context: SshTarget & { name: string },
  options: HereOptions,
): Promise<ApplyResult> {
  const diff = findAction("diff")!;
  const asked = {
    action: "diff",
    name: args.name,
    ...(args.since !== undefined ? { since: args.since } : {}),
    ...(args.path !== undefined ? { path: args.path } : {}),
  };
  let made: WorkspaceDiff;
  try {
    const send = options.send ?? ((spec, input) => callThroughContext(spec, input, context, options.remote));
    made = (await send(diff, asked)) as WorkspaceDiff;
  } catch (error) {
    if (isControllerError(error) && error.code === "CONTROLLER_PATCH_TOO_LARGE") {
      throw new ControllerError("CONTROLLER_PATCH_TOO_LARGE", `${error.message} through context ${context.name}`, {
        hint: `Apply a part at a time (pi-sandbox apply ${args.name} PATH --context ${context.name}), or run apply on that machine.`,
        details: { ...(error.details as Record<string, unknown>), context: context.name },
      });
    }
    throw error;
  }
  const { patch = "", ...view } = made;
  // The far side's parse is not trusted: the patch is read again here, as a local apply reads the guest's.
  const parsed = parsePatch(patch);
  if (parsed.files.length === 0) return { ...view, to: args.to, gitWorkTree: false, how: "none", conflicts: [] };
  const { guarded } = options;
  const places = guarded ? await hostPlaces(options.local.layout.root, options.local.env) : undefined;
  for (;;) {
    try {
      const outcome = await applyPatch(Buffer.from(patch, "utf8"), parsed, args.to, {
        ...(args.force ? { force: true } : {}),
        ...(guarded && places ? { guard: { limits: guarded.guard, places } } : {}),
      });
      return { ...view, files: parsed.files, stat: statOf(parsed), ...outcome };
    } catch (error) {
      // A path where code runs, or outside the project: the user is asked once, then it applies.
      if (!(await guarded?.askAgain(error))) throw error;
    }
  }
}

function statOf(parsed: ReturnType<typeof parsePatch>) {
  return { files: parsed.files.length, added: parsed.added, deleted: parsed.deleted };
}
