// An instance's kept checkpoints as actions report them: read from its disk directory's records
// (no daemon, no VM machinery), the same view for `checkpoints` and for what the daemon took.
import { listKept, type KeptCheckpointInfo } from "@pi-sandbox/vm/host";
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
