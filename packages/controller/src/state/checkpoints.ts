// An instance's kept checkpoints as actions report them: read from its disk directory's records
// (no daemon, no VM machinery), the same view for `checkpoints` and for what the daemon took.
import { listKept, type KeptCheckpointInfo } from "@pi-sandbox/vm/host";
import { ControllerError } from "../errors.js";
import type { StateLayout } from "./layout.js";

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
}

/** A kept checkpoint as actions report it (`bytes` 0 when not measured). */
export function checkpointView(kept: Omit<KeptCheckpointInfo, "bytes"> & { bytes?: number }): CheckpointView {
  return {
    id: kept.id,
    ...(kept.label !== undefined ? { label: kept.label } : {}),
    pinned: kept.pinned,
    createdAt: kept.createdAt,
    kind: kept.memory ? "memory" : "disk",
    bytes: kept.bytes ?? 0,
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
