// Forks of one instance into new ones (daemon/branches.ts runs them in the instance's lifecycle
// queue): each fork gets its own disk (the vm package's hard-linked layers, the saved memory too
// when there is one), record, status and agent door; its first start gives it its own identity.
// A fork is of the instance as it is (the caller pauses a running one for the copy of its memory)
// or of one of its kept checkpoints (never changing: nothing is paused).

import { mkdir, rm } from "node:fs/promises";
import { isValidInstanceName } from "@pi-sandbox/config";
import type { AgentDoor } from "@pi-sandbox/supervisor";
import type { ForkResult } from "../actions/kit/context.js";
import { ControllerError } from "../errors.js";
import type { WorkspaceLeftOut } from "../state/checkpoints.js";
import type { StateLayout } from "../state/layout.js";
import { readRecord, writeRecord, writeStatus, type EntryRecord, type PreviewLinkInfo } from "../state/records.js";
import type { ProgressEvent } from "../wire.js";
import { readAgentDoor, writeAgentDoor } from "./agent-door.js";
import type { InstanceRuntime, KeptCheckpoint } from "./runtime.js";

/**
 * What the controller keeps with a checkpoint: for a memory one, what a warm start of it reopens;
 * for one of a running instance, the large files its record of the workspace left out.
 */
export interface KeptExtra {
  agentDoor?: AgentDoor;
  previews?: PreviewLinkInfo[];
  leftOut?: WorkspaceLeftOut;
}

/** What a fork copies: the instance's disk as it is now, or one of its kept checkpoints. */
export type ForkSource =
  /** The disk now (stopped or suspended); `previews`: those of its saved memory, if any. */
  { kind: "now"; previews?: readonly PreviewLinkInfo[] } | { kind: "checkpoint"; kept: KeptCheckpoint };

/** The instance being forked. */
export interface ForkOrigin {
  name: string;
  layout: StateLayout;
  runtime: InstanceRuntime;
  record: EntryRecord;
}

/** Refuses names that are not valid, repeat, or name the source or an existing instance. */
export async function checkForkNames(origin: ForkOrigin, names: readonly string[]): Promise<void> {
  const seen = new Set<string>();
  for (const fork of names) {
    if (!isValidInstanceName(fork)) {
      throw new ControllerError("CONTROLLER_INVALID_NAME", `${JSON.stringify(fork)} is not a valid instance name`, {
        hint: "Use a lowercase letter, then up to 39 of a-z, 0-9, '-'.",
        details: { name: fork },
      });
    }
    if (fork === origin.name || seen.has(fork) || (await readRecord(origin.layout, "instances", fork))) {
      throw new ControllerError("CONTROLLER_ALREADY_EXISTS", `an instance named ${fork} already exists`, {
        hint: "Pick names no instance has (pi-sandbox ls lists them).",
        details: { name: fork },
      });
    }
    seen.add(fork);
  }
}

/** Makes each fork of `names` from `source`; on a failure, removes what it made and throws. */
export async function makeForks(
  origin: ForkOrigin,
  names: readonly string[],
  source: ForkSource,
  progress: (event: ProgressEvent) => void,
): Promise<ForkResult["forks"]> {
  const made: ForkResult["forks"] = [];
  try {
    for (const fork of names) {
      made.push({ name: fork, kind: await forkOne(origin, fork, source) });
      progress({ stage: "disk", message: `forked ${origin.name} into ${fork}` });
    }
  } catch (error) {
    for (const { name } of [...made, { name: names[made.length]! }]) await removeFork(origin, name);
    throw error;
  }
  return made;
}

/** One fork: its disk (memory too, when the source's is saved), record, status and agent door. */
async function forkOne(origin: ForkOrigin, fork: string, source: ForkSource): Promise<"memory" | "disk"> {
  const { layout, name } = origin;
  const diskDir = layout.diskDir("instances", name);
  await mkdir(layout.entryDir("instances", fork), { recursive: true, mode: 0o700 });
  const kept = source.kind === "checkpoint" ? source.kept : undefined;
  const disk = await origin.runtime.disks.fork(diskDir, layout.diskDir("instances", fork), {
    ...(kept ? { checkpoint: kept.id } : {}),
  });
  const memory = disk.memoryBytes > 0;
  const extra = (kept?.extra ?? {}) as KeptExtra;
  if (memory) {
    const door = kept ? extra.agentDoor : await readAgentDoor(layout, "instances", name);
    await writeAgentDoor(layout, "instances", fork, door);
  }
  const at = new Date().toISOString();
  const { pendingCreate: _none, forkedFrom: _theirs, template: _template, ...rest } = origin.record;
  await writeRecord(layout, {
    ...rest,
    name: fork,
    createdAt: at,
    forkedFrom: { name, at },
    pendingCreate: { newIdentity: true, fork: true },
  });
  const previews = kept ? extra.previews : source.kind === "now" ? source.previews : undefined;
  await writeStatus(layout, "instances", fork, {
    state: memory ? "suspended" : "stopped",
    updatedAt: at,
    previews: memory ? [...(previews ?? [])] : [],
  });
  return memory ? "memory" : "disk";
}

/** Removes what a failed fork made of `fork` (nothing of an instance that existed before). */
async function removeFork(origin: ForkOrigin, fork: string): Promise<void> {
  const { layout } = origin;
  const record = await readRecord(layout, "instances", fork).catch(() => undefined);
  if (record && record.forkedFrom?.name !== origin.name) return;
  await origin.runtime.disks.destroy(layout.diskDir("instances", fork)).catch(() => undefined);
  await rm(layout.entryDir("instances", fork), { recursive: true, force: true }).catch(() => undefined);
}
