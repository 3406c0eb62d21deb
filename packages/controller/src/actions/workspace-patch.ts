// What `diff` and `apply` share: their results, limits and arguments, the base an action names
// (the create, a kept checkpoint by id or label, another instance), and the guest's patch read and
// checked (patch-parse.ts), with the words that print it.

import { posix } from "node:path";
import * as v from "valibot";
import { hasControlChars } from "@pi-sandbox/config";
import { listKept } from "@pi-sandbox/vm/host";
import { ControllerError } from "../errors.js";
import { findCheckpoint } from "../state/checkpoints.js";
import { StateLayout } from "../state/layout.js";
import type { WorkspaceBase, WorkspacePatchBytes } from "./kit/context.js";
import type { WorkspaceLeftOut } from "../state/checkpoints.js";
import type { DaemonContext } from "./kit/define.js";
import { arg, GUEST_PATH, text } from "./kit/parts.js";
import { oneLine } from "./kit/text.js";
import { parsePatch, patchText, type PatchFile } from "./patch-parse.js";

/** Largest patch `diff` returns, in bytes: its JSON must fit one line of the daemon's socket (8 MiB). */
export const DIFF_PATCH_MAX_BYTES = 3 * 1024 * 1024;
/** Largest patch `apply` (and `diff --stat`) reads from the guest, in bytes. */
export const APPLY_PATCH_MAX_BYTES = 64 * 1024 * 1024;

/** Totals of a patch. */
export interface PatchStat {
  files: number;
  /** Lines added. */
  added: number;
  /** Lines removed. */
  deleted: number;
}

/** What `diff` reports. */
export interface WorkspaceDiff {
  name: string;
  /** What the changes are measured from. */
  base: WorkspaceBase;
  /** The snapshot of the base (40 hex digits). */
  baseCommit: string;
  /** The snapshot of the workspace now. */
  commit: string;
  /** The path (relative to the workspace) the changes were restricted to. */
  path?: string;
  /** Each file changed. */
  files: PatchFile[];
  stat: PatchStat;
  /** The patch, for `git apply` (left out with `stat`). */
  patch?: string;
  /** Large files the base checkpoint's record of the workspace left out, so the patch leaves them out too. */
  leftOut?: WorkspaceLeftOut;
}

/** What `apply` did. */
export interface ApplyResult extends Omit<WorkspaceDiff, "patch"> {
  /** The host directory (real path). */
  to: string;
  /** It is in a git work tree. */
  gitWorkTree: boolean;
  /** `3way`: merged like `git apply --3way` (the index too); `plain`: like `git apply`; `none`: nothing to apply. */
  how: "3way" | "plain" | "none";
  /** Files left with conflict markers, relative to `to`. */
  conflicts: string[];
}

/** A checkpoint an action names: its id or label. */
export const checkpointTarget = v.pipe(text, v.maxLength(100));
/** A guest path argument: printable, at most 4096 characters. */
export const guestPathArg = v.pipe(
  text,
  v.maxLength(4096),
  v.check((value: string) => !hasControlChars(value), "must not contain control characters"),
);

/** The `since` argument of diff and apply. */
export const sinceArg = arg(
  "since",
  "string",
  false,
  "a kept checkpoint (id, or label: the newest with it) to compare with instead of the instance's create",
);
/** The `path` argument of diff and apply. */
export const pathArg = arg(
  "path",
  "string",
  false,
  "only changes under this guest path (relative to the workspace, or absolute inside it)",
  GUEST_PATH,
);

/** The base an action names: a checkpoint (resolved to its id), another instance, or the create. */
async function baseOf(
  args: { name: string; since?: string; against?: string },
  ctx: DaemonContext,
): Promise<WorkspaceBase> {
  if (args.against !== undefined) return { kind: "instance", name: args.against };
  if (args.since === undefined) return { kind: "created" };
  const kept = await listKept(new StateLayout(ctx.stateRoot).diskDir("instances", args.name));
  const found = findCheckpoint(kept, args.since, args.name);
  return { kind: "checkpoint", id: found.id, ...(found.label !== undefined ? { label: found.label } : {}) };
}

/** A guest path argument as a path relative to the workspace; undefined for the whole workspace. */
function workspaceRelative(path: string | undefined, workspace: string): string | undefined {
  if (path === undefined) return undefined;
  const absolute = posix.resolve(workspace, path);
  const relative = posix.relative(workspace, absolute);
  if (relative === ".." || relative.startsWith("../") || posix.isAbsolute(relative)) {
    throw new ControllerError("CONTROLLER_BAD_INPUT", `${path} is not inside the workspace ${workspace}`, {
      hint: "Name a path inside the workspace, relative to it.",
      details: { path },
    });
  }
  return relative === "" ? undefined : relative;
}

/** The guest's patch, read and checked: printable text git writes, its files listed. */
export async function checkedPatch(
  args: { name: string; since?: string; against?: string; path?: string },
  ctx: DaemonContext,
  maxBytes: number,
) {
  const base = await baseOf(args, ctx);
  const path = workspaceRelative(args.path, ctx.guest.supervisor().workspace);
  const made: WorkspacePatchBytes = await ctx.guest.workspacePatch({
    base,
    ...(path !== undefined ? { path } : {}),
    maxBytes,
    ...(ctx.signal ? { signal: ctx.signal } : {}),
  });
  const text = patchText(made.patch);
  const parsed = parsePatch(text);
  const stat = { files: parsed.files.length, added: parsed.added, deleted: parsed.deleted };
  const view: Omit<WorkspaceDiff, "patch"> = {
    name: args.name,
    base,
    baseCommit: made.baseCommit,
    commit: made.commit,
    ...(path !== undefined ? { path } : {}),
    files: parsed.files,
    stat,
    ...(made.leftOut ? { leftOut: made.leftOut } : {}),
  };
  if (made.leftOut) ctx.progress({ stage: "diff", message: leftOutOfPatch(made.leftOut) });
  return { bytes: made.patch, text, parsed, view };
}

/** The files a patch leaves out because its base checkpoint did not record them, in a line (names escaped). */
export function leftOutOfPatch(left: WorkspaceLeftOut, shown = 10): string {
  const names = left.files.slice(0, shown).map(oneLine);
  const more = left.count > names.length ? `, and ${left.count - names.length} more` : "";
  return `left out: ${left.count} file${left.count === 1 ? "" : "s"} over ${+(left.overBytes / 2 ** 20).toFixed(1)} MiB that the checkpoint did not record (copy ${left.count === 1 ? "it" : "them"} with pi-sandbox cp): ${names.join(", ")}${more}`;
}

/** The base in words: "its create", "checkpoint 0a1b2c3d4e5f (label)", "the workspace of web-2". */
export function baseText(base: WorkspaceBase): string {
  if (base.kind === "created") return "its create";
  if (base.kind === "checkpoint")
    return `checkpoint ${base.id}${base.label !== undefined ? ` (${oneLine(base.label)})` : ""}`;
  return `the workspace of ${oneLine(base.name)}`;
}

const STATUS_LETTER: Record<PatchFile["status"], string> = {
  added: "A",
  deleted: "D",
  modified: "M",
  renamed: "R",
  copied: "C",
};

/** One line per file and the totals, like `git diff --stat` (every name escaped). */
export function statLines(files: readonly PatchFile[], stat: PatchStat): string[] {
  const lines = files.map((f) => {
    const name = f.oldPath !== undefined ? `${oneLine(f.oldPath)} → ${oneLine(f.path)}` : oneLine(f.path);
    const counts = f.binary ? "binary" : `+${f.added} -${f.deleted}`;
    const mode = f.oldMode && f.newMode && f.oldMode !== f.newMode ? `  mode ${f.oldMode} → ${f.newMode}` : "";
    const link = f.symlink !== undefined ? `  → ${oneLine(f.symlink)}` : "";
    return `${STATUS_LETTER[f.status]}  ${name}  ${counts}${mode}${link}`;
  });
  lines.push(
    `${stat.files} file${stat.files === 1 ? "" : "s"} changed, ${stat.added} insertion${stat.added === 1 ? "" : "s"}(+), ${stat.deleted} deletion${stat.deleted === 1 ? "" : "s"}(-)`,
  );
  return lines;
}

/** A patch's totals in a few words, for Pi's renderer. */
export const briefStat = (stat: PatchStat) =>
  stat.files === 0 ? "no changes" : `${stat.files} file(s) changed, +${stat.added} -${stat.deleted}`;
