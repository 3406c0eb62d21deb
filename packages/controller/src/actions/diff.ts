// Bring the work home: `diff` prints the changes in a guest workspace as a patch `git apply` takes
// (since the instance's create, a checkpoint, or against another instance's workspace), `apply`
// applies them to a host directory, and `workspace-export` is what `diff --against` asks of the
// other instance's daemon. The guest makes the patch (daemon/workspace-snapshots.ts); the host
// trusts none of it (patch-parse.ts, patch-apply.ts; the shared parts in workspace-patch.ts).

import { existsSync } from "node:fs";
import * as v from "valibot";
import { INSTANCE_NAME_PATTERN } from "@pi-sandbox/config";
import { ControllerError } from "../errors.js";
import { StateLayout } from "../state/layout.js";
import { UsageError, defineAction, type CliInput } from "./kit/define.js";
import { actionSchema, arg, name, nameArg, positional, text } from "./kit/parts.js";
import { lazyHandler } from "./kit/lazy.js";
import { oneLine } from "./kit/text.js";
import {
  APPLY_PATCH_MAX_BYTES,
  DIFF_PATCH_MAX_BYTES,
  baseText,
  briefStat,
  checkedPatch,
  checkpointTarget,
  guestPathArg,
  leftOutOfPatch,
  pathArg,
  sinceArg,
  statLines,
  type ApplyResult,
  type WorkspaceDiff,
} from "./workspace-patch.js";

export type { ApplyResult, PatchStat, WorkspaceDiff } from "./workspace-patch.js";

function formatDiff(result: WorkspaceDiff): string {
  // The patch alone: what the CLI prints is for git apply (the progress line names what it left out).
  if (result.patch !== undefined) return result.patch;
  const left = result.leftOut ? `${leftOutOfPatch(result.leftOut)}\n` : "";
  if (result.files.length === 0)
    return `no changes in ${oneLine(result.name)}'s workspace since ${baseText(result.base)}\n${left}`;
  return `${statLines(result.files, result.stat).join("\n")} since ${baseText(result.base)}\n${left}`;
}

/** True when `word` names an existing instance (for `diff a b`: compare two instances). */
function isInstance(word: string): boolean {
  if (!INSTANCE_NAME_PATTERN.test(word)) return false;
  return existsSync(StateLayout.fromEnv(process.env).recordFile("instances", word));
}

/** `diff <name> [<other>] [<path>]`: a second instance name compares with it, anything else is a path. */
function diffAction(input: CliInput): Record<string, unknown> {
  const instance = positional(input, 0, "an instance name", "diff");
  const rest = input.positionals.slice(1);
  const since = typeof input.values.since === "string" ? input.values.since : undefined;
  let against = typeof input.values.against === "string" ? input.values.against : undefined;
  let path: string | undefined;
  if (rest.length > 2) {
    throw new UsageError("diff takes an instance, another instance to compare with and a path, at most");
  }
  if (rest.length === 2) {
    if (against !== undefined) {
      throw new UsageError("diff takes one instance to compare with (--against or a second name)");
    }
    [against, path] = rest as [string, string];
  } else if (rest.length === 1) {
    if (against === undefined && since === undefined && isInstance(rest[0]!)) against = rest[0];
    else path = rest[0];
  }
  return {
    action: "diff",
    name: instance,
    ...(since !== undefined ? { since } : {}),
    ...(against !== undefined ? { against } : {}),
    ...(path !== undefined ? { path } : {}),
    ...(input.values.stat === true ? { stat: true } : {}),
  };
}

function refineBase(args: { since?: string; against?: string; name: string }): void {
  if (args.since !== undefined && args.against !== undefined) {
    throw new ControllerError("CONTROLLER_BAD_INPUT", "diff compares with one base: since or against, not both");
  }
  if (args.against !== undefined && !INSTANCE_NAME_PATTERN.test(args.against)) {
    throw new ControllerError("CONTROLLER_INVALID_NAME", `${JSON.stringify(args.against)} is not an instance name`);
  }
}

/** `diff`: the workspace's changes as a patch. */
export const diff = defineAction({
  name: "diff",
  summary:
    "the changes in the guest workspace as a patch git apply takes (new, deleted, renamed, binary and mode changes), since the instance's create, since a kept checkpoint, or against another instance's workspace (a fork); a git repository in the workspace is not needed",
  args: [
    nameArg,
    sinceArg,
    arg("against", "string", false, "another instance (a fork) whose workspace now to compare with"),
    pathArg,
    arg("stat", "boolean", false, "a summary instead of the patch: what changed, with line counts"),
  ],
  route: "daemon",
  long: true,
  schema: actionSchema("diff", {
    name,
    since: v.optional(checkpointTarget),
    against: v.optional(name),
    path: v.optional(guestPathArg),
    stat: v.optional(v.boolean()),
  }),
  refine: refineBase,
  cli: {
    usage: "diff <name> [<other>] [--since CP | --against OTHER] [--stat] [PATH]   the workspace's changes as a patch",
    options: {
      since: {
        type: "string",
        value: "checkpoint",
        description: "compare with a kept checkpoint (id or label), not the create",
      },
      against: {
        type: "string",
        value: "instance",
        description: "compare with another instance's workspace now (a fork)",
      },
      stat: { type: "boolean", description: "files changed and line counts only" },
    },
    toAction: diffAction,
    print: () => formatDiff as (result: never) => string,
    notes: [
      "pi-sandbox diff demo > work.patch && git apply work.patch     bring the work home by hand",
      "pi-sandbox diff demo-1 demo-2                                 compare two forks (demo-2 is the base)",
      "The guest records its workspace (a git store in /var/lib/pi-sandbox, not the workspace's own",
      ".git) when the instance is created and at each checkpoint taken while it runs. Ignored files",
      "(.gitignore) and node_modules/ are left out. A file that is not printable UTF-8 text is",
      "given as a binary patch, so the patch prints safely; one larger than 3 MiB needs --stat, a",
      "PATH or apply. A second name that is no instance is a PATH (write ./name for a path anyway).",
    ],
  },
  run: async (args, ctx): Promise<WorkspaceDiff> => {
    const made = await checkedPatch(args, ctx, args.stat ? APPLY_PATCH_MAX_BYTES : DIFF_PATCH_MAX_BYTES);
    return args.stat ? made.view : { ...made.view, patch: made.text };
  },
  formatText: formatDiff,
  brief: (result) => briefStat(result.stat),
});

function formatApply(result: ApplyResult): string {
  if (result.how === "none") {
    return `nothing to apply: no changes in ${oneLine(result.name)}'s workspace since ${baseText(result.base)}\n`;
  }
  const how = result.how === "3way" ? "git apply --3way" : "git apply";
  const lines = [
    `applied ${oneLine(result.name)}'s changes since ${baseText(result.base)} to ${oneLine(result.to)} (${how})`,
    ...statLines(result.files, result.stat),
  ];
  if (result.conflicts.length > 0) {
    lines.push(
      `${result.conflicts.length} file(s) with conflicts to resolve: ${result.conflicts.map(oneLine).join(", ")}`,
    );
  }
  if (result.leftOut) lines.push(leftOutOfPatch(result.leftOut));
  return `${lines.join("\n")}\n`;
}

/** `apply`: the workspace's changes applied to a host directory. */
export const apply = defineAction({
  name: "apply",
  summary:
    "apply the guest workspace's changes (what diff prints) to a host directory: in a git work tree it merges like git apply --3way and leaves files with uncommitted changes alone unless forced; elsewhere it applies like git apply. All or nothing",
  args: [
    nameArg,
    sinceArg,
    pathArg,
    arg(
      "to",
      "string",
      false,
      "host directory to apply to, relative to the caller's directory; default the caller's directory",
      {
        kind: "host-file-write",
      },
    ),
    arg("force", "boolean", false, "patch what has uncommitted changes too (plain git apply, no merge)"),
  ],
  route: "daemon",
  long: true,
  schema: actionSchema("apply", {
    name,
    since: v.optional(checkpointTarget),
    path: v.optional(guestPathArg),
    to: v.optional(text, "."),
    force: v.optional(v.boolean()),
  }),
  cli: {
    usage: "apply <name> [--since CP] [--to DIR] [--force] [PATH]   apply the workspace's changes to a host directory",
    options: {
      since: {
        type: "string",
        value: "checkpoint",
        description: "the changes since a kept checkpoint (id or label), not the create",
      },
      to: { type: "string", value: "dir", description: "host directory to apply to (default: the current one)" },
      force: { type: "boolean", description: "patch files with uncommitted changes too (no 3-way merge)" },
    },
    toAction: (input) => ({
      action: "apply",
      name: positional(input, 0, "an instance name", "apply"),
      ...(typeof input.values.since === "string" ? { since: input.values.since } : {}),
      ...(input.positionals[1] !== undefined ? { path: input.positionals[1] } : {}),
      ...(typeof input.values.to === "string" ? { to: input.values.to } : {}),
      ...(input.values.force === true ? { force: true } : {}),
    }),
    notes: [
      "Checks before anything is written: every path is plain and relative (no .., no .git, no",
      "host symlink on the way), every symlink it writes points inside DIR, and git reads the patch",
      "as touching the same files. In a git work tree the changes are staged, as git apply --3way",
      "does, and conflicts are left marked in the files. A model's apply writes freely only inside",
      "its project, and asks the user for paths where code runs (package.json, .github/, …).",
    ],
  },
  run: lazyHandler(async () => (await import("./apply-run.js")).runApply),
  formatText: formatApply,
  brief: (result) =>
    result.how === "none"
      ? "nothing to apply"
      : `applied ${briefStat(result.stat)}${result.conflicts.length ? `, ${result.conflicts.length} conflict(s)` : ""}`,
});

/** `workspace-export`: a bundle of the workspace for another instance's `diff --against`. */
export const workspaceExport = defineAction({
  name: "workspace-export",
  summary:
    "write a git bundle of the guest workspace now to a new host file (what diff --against asks of the other instance); mostly for the controller itself",
  args: [
    nameArg,
    arg("to", "string", true, "new host file for the bundle (an existing one is never overwritten)", {
      kind: "host-file-write",
    }),
    arg("known", "string", false, "a commit id (40 hex digits) the receiver holds: what it holds is left out"),
  ],
  route: "daemon",
  long: true,
  userOnly: true,
  schema: actionSchema("workspace-export", {
    name,
    to: text,
    known: v.optional(v.pipe(v.string(), v.regex(/^[0-9a-f]{40}$/))),
  }),
  run: (args, ctx) => {
    // The client refuses it to a model; a guard here means a call that bypassed it.
    if (ctx.guard) throw new ControllerError("CONTROLLER_USER_ONLY", "workspace-export is for the user, not the model");
    return ctx.guest.exportWorkspace(args.to, {
      ...(args.known ? { known: args.known } : {}),
      ...(ctx.signal ? { signal: ctx.signal } : {}),
    });
  },
  formatText: (result) =>
    result.bundled
      ? `wrote ${result.bytes} bytes (snapshot ${result.commit})\n`
      : `nothing written: the receiver holds ${result.commit}\n`,
});
