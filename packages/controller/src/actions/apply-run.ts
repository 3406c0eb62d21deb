// The apply action's handler (actions/diff.ts), loaded on its first call: it brings the patch
// applier (patch-apply.ts), which no other action runs.
import { hostPlaces } from "../host-places.js";
import type { DaemonContext } from "./kit/define.js";
import { applyPatch } from "./patch-apply.js";
import { APPLY_PATCH_MAX_BYTES, checkedPatch, type ApplyResult } from "./workspace-patch.js";

/** Makes the workspace's patch in the guest, checks it on the host and applies it to `args.to`. */
export async function runApply(
  args: {
    name: string;
    since?: string | undefined;
    path?: string | undefined;
    to: string;
    force?: boolean | undefined;
  },
  ctx: DaemonContext,
): Promise<ApplyResult> {
  const made = await checkedPatch(args, ctx, APPLY_PATCH_MAX_BYTES);
  if (made.parsed.files.length === 0) {
    return { ...made.view, to: args.to, gitWorkTree: false, how: "none", conflicts: [] };
  }
  const outcome = await applyPatch(made.bytes, made.parsed, args.to, {
    ...(args.force ? { force: true } : {}),
    ...(ctx.guard ? { guard: { limits: ctx.guard, places: await hostPlaces(ctx.stateRoot) } } : {}),
  });
  return { ...made.view, ...outcome };
}
