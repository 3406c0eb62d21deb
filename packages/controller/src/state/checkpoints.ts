// An instance's kept checkpoints as actions report them: read from its disk directory's records
// (no daemon, no VM machinery), the same view for `checkpoints` and for what the daemon took.
import { escapeControlChars } from "@pi-sandbox/config";
import { listKept, type KeptCheckpointInfo } from "@pi-sandbox/vm/host";
import { ControllerError } from "../errors.js";
import type { StateLayout } from "./layout.js";

/**
 * Workspace files a checkpoint's record of the workspace left out, being larger than `overBytes`
 * (`diff --since` it leaves them out too). Names are the guest's: escape them before printing.
 */
export interface WorkspaceLeftOut {
  /** The first 100, relative to the workspace. */
  files: string[];
  /** How many there are. */
  count: number;
  overBytes: number;
}

/** A kept checkpoint as actions report it. */
export interface CheckpointView {
  /** 12 hex digits; `rewind` and `checkpoint rm` take it (or the label). */
  id: string;
  label?: string;
  /** Never pruned by `checkpoint.keep`/`keepGiB`. */
  pinned: boolean;
  /** ISO time it was taken. */
  createdAt: string;
  /** `memory`: a rewind resumes its processes; `disk`: a rewind boots its disk. */
  kind: "disk" | "memory";
  /** Host bytes that only kept checkpoints hold (not the instance's current disk). */
  bytes: number;
  /** Large workspace files its record of the workspace left out. */
  leftOut?: WorkspaceLeftOut;
}

/**
 * The files left out, in a line: `the workspace record left out 2 files over 2 MiB (diff --since
 * leaves them out too): a.db, logs/x.log`; guest names escaped.
 */
export function leftOutText(left: WorkspaceLeftOut, shown = 10): string {
  const names = left.files.slice(0, shown).map((f) => escapeControlChars(f));
  const more = left.count > names.length ? `, and ${left.count - names.length} more` : "";
  const over = `${+(left.overBytes / 2 ** 20).toFixed(1)} MiB`;
  return `the workspace record left out ${left.count} file${left.count === 1 ? "" : "s"} over ${over} (diff --since leaves ${left.count === 1 ? "it" : "them"} out too): ${names.join(", ")}${more}`;
}

/** The left-out files a checkpoint's record keeps in its `extra` (the controller's own JSON), when well formed. */
function leftOutOf(extra: unknown): WorkspaceLeftOut | undefined {
  const left = (extra as { leftOut?: Partial<WorkspaceLeftOut> } | null | undefined)?.leftOut;
  if (!left || !Array.isArray(left.files) || !left.files.every((f) => typeof f === "string")) return undefined;
  if (!Number.isSafeInteger(left.count) || !Number.isSafeInteger(left.overBytes)) return undefined;
  return { files: left.files.slice(0, 100), count: left.count!, overBytes: left.overBytes! };
}

/** A kept checkpoint as actions report it (`bytes` 0 when not measured). */
export function checkpointView(kept: Omit<KeptCheckpointInfo, "bytes"> & { bytes?: number }): CheckpointView {
  const leftOut = leftOutOf(kept.extra);
  return {
    id: kept.id,
    ...(kept.label !== undefined ? { label: kept.label } : {}),
    pinned: kept.pinned,
    createdAt: kept.createdAt,
    kind: kept.memory ? "memory" : "disk",
    bytes: kept.bytes ?? 0,
    ...(leftOut ? { leftOut } : {}),
  };
}

/** The kept checkpoints of instance `name`, oldest first. */
export async function listCheckpoints(layout: StateLayout, name: string): Promise<CheckpointView[]> {
  return (await listKept(layout.diskDir("instances", name))).map(checkpointView);
}

/** The checkpoint a user means by `target`: its id, else the newest with that label. */
export function findCheckpoint(kept: readonly KeptCheckpointInfo[], target: string, name: string): KeptCheckpointInfo {
  const found = kept.find((k) => k.id === target) ?? kept.filter((k) => k.label === target).at(-1);
  if (found) return found;
  throw new ControllerError("CONTROLLER_NOT_FOUND", `${name} has no checkpoint with the id or label ${target}`, {
    hint: `List them with {"action":"checkpoints","name":"${name}"}.`,
    details: { name, checkpoint: target },
  });
}

/**
 * The oldest unpinned checkpoints to remove so that at most `limit.count` remain and they hold at
 * most `limit.bytes`; never `keep` (the one just taken). Pure.
 */
export function checkpointsToPrune(
  kept: readonly KeptCheckpointInfo[],
  limit: { count: number; bytes: number },
  keep: string,
): KeptCheckpointInfo[] {
  let count = kept.length;
  let bytes = kept.reduce((sum, k) => sum + k.bytes, 0);
  const prune: KeptCheckpointInfo[] = [];
  for (const k of kept) {
    if (count <= limit.count && bytes <= limit.bytes) break;
    if (k.pinned || k.id === keep) continue;
    prune.push(k);
    count--;
    bytes -= k.bytes;
  }
  return prune;
}
