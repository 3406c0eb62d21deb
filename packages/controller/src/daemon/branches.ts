// Branches of one instance's state: kept checkpoints (taken while it runs or not), a rewind to one,
// and forks into new instances (forks.ts). Each runs alone in the instance's lifecycle queue
// (instance.ts). The disk side (hard-linked layer chains, saved memory) is the vm package's; here
// is what the instance around it needs: its status, previews and agent door, and its record. The
// memory of a running guest is kept while it runs (QEMU pauses it for the last pages only).

import { randomBytes } from "node:crypto";
import { messageOf } from "@pi-sandbox/config";
import type { BranchActions, CheckpointTaken, CheckpointView, ForkResult } from "../actions/kit/context.js";
import { ControllerError } from "../errors.js";
import {
  checkpointView,
  checkpointsToPrune,
  findCheckpoint,
  leftOutText,
  type WorkspaceLeftOut,
} from "../state/checkpoints.js";
import { notFound, type EntryView } from "../state/inspect.js";
import {
  checkpointKeepOf,
  completePendingCreate,
  readRecord,
  readStatus,
  type EntryRecord,
  type PreviewLinkInfo,
} from "../state/records.js";
import type { ProgressEvent } from "../wire.js";
import { readAgentDoor, writeAgentDoor } from "./agent-door.js";
import { checkForkNames, makeForks, type ForkOrigin, type KeptExtra } from "./forks.js";
import type { Lifecycle } from "./lifecycle.js";
import type { InstanceRuntime, KeepOptions, KeptCheckpoint, KeptCheckpointInfo } from "./runtime.js";
import { checkpointRef, snapshotWorkspace } from "./workspace-snapshots.js";
import type { InstanceState } from "./state.js";

type Progress = (event: ProgressEvent) => void;

/** Kept checkpoints, rewind and fork of one instance. */
export class Branches {
  constructor(
    private readonly state: InstanceState,
    private readonly lifecycle: Lifecycle,
    private readonly runtime: InstanceRuntime,
  ) {}

  /** The operations for one call, reporting to `progress`; `queue` serialises them with the lifecycle. */
  actions(progress: Progress, queue: <T>(work: () => Promise<T>) => Promise<T>): BranchActions {
    return {
      checkpoint: (options) => queue(() => this.checkpoint(options, progress)),
      removeCheckpoint: (target) => queue(() => this.removeCheckpoint(target, progress)),
      rewind: (target) => queue(() => this.rewind(target, progress)),
      fork: (names, options) => queue(() => this.fork(names, progress, options?.from)),
    };
  }

  private get name(): string {
    return this.state.name;
  }

  private get diskDir(): string {
    return this.state.layout.diskDir("instances", this.name);
  }

  /** The instance's record; a template or a create not finished yet is refused. */
  private async record(action: string): Promise<EntryRecord> {
    const { state } = this;
    const record = state.kind === "instances" ? await readRecord(state.layout, "instances", this.name) : undefined;
    if (!record) throw notFound("instances", this.name);
    // A running instance's create has finished (setup ran); its first checkpoint just had not
    // been taken yet: the live checkpoint or the suspend of this action takes it.
    const created = state.vm !== undefined && state.status.state === "running";
    if (record.pendingCreate && !record.pendingCreate.fork && !created) {
      throw new ControllerError(
        "CONTROLLER_NOT_RUNNING",
        `the create of ${this.name} has not finished; it cannot ${action} yet`,
        {
          hint: `Finish it with {"action":"start","name":"${this.name}"}.`,
          details: { name: this.name },
        },
      );
    }
    return record;
  }

  /** Whether the instance's saved memory is current (suspended, by a user or its idle clock). */
  private async suspended(): Promise<boolean> {
    if (this.state.vm) return false;
    const status = await readStatus(this.state.layout, "instances", this.name);
    return status?.state === "suspended";
  }

  /** What a warm start of a memory copy reopens: the agent's door and the previews of `status`. */
  private async extra(previews: readonly PreviewLinkInfo[] | undefined): Promise<KeptExtra> {
    const agentDoor = await readAgentDoor(this.state.layout, "instances", this.name);
    return { ...(agentDoor ? { agentDoor } : {}), previews: [...(previews ?? [])] };
  }

  async checkpoint(
    options: { label?: string; memory?: boolean; pin?: boolean },
    progress: Progress,
  ): Promise<CheckpointTaken> {
    const record = await this.record("keep a checkpoint");
    const keep = {
      ...(options.label !== undefined ? { label: options.label } : {}),
      pinned: options.pin === true,
    };
    let kept: KeptCheckpoint;
    let stallMs: number | undefined;
    let pauseMs: number | undefined;
    if (this.state.vm && options.memory) {
      progress({ stage: "checkpoint", message: "saving the guest's memory while it runs, then switching its disk" });
      const extra = await this.extra(this.state.status.previews);
      ({ kept, pauseMs } = await this.keepRunning({ ...keep, memory: true, extra }, progress));
    } else if (this.state.vm) {
      progress({ stage: "checkpoint", message: "syncing the guest and switching its disk to a new layer" });
      ({ kept, stallMs } = await this.keepRunning(keep, progress));
      // The disk holds the create's work now.
      await completePendingCreate(this.state.layout, this.name);
    } else {
      const suspended = await this.suspended();
      if (options.memory && !suspended) {
        throw new ControllerError(
          "CONTROLLER_NOT_RUNNING",
          `${this.name} is stopped: there is no memory to keep, only its disk`,
          {
            hint: `Start it first, or keep a disk checkpoint with {"action":"checkpoint","name":"${this.name}"}.`,
            details: { name: this.name },
          },
        );
      }
      const status = suspended ? await readStatus(this.state.layout, "instances", this.name) : undefined;
      kept = await this.runtime.disks.keepCheckpoint(this.diskDir, {
        ...keep,
        ...(options.memory ? { memory: true, extra: await this.extra(status?.previews) } : {}),
      });
    }
    const pruned = await this.prune(record, kept.id);
    const all = await this.runtime.disks.checkpoints(this.diskDir);
    const view = checkpointView(all.find((k) => k.id === kept.id) ?? kept);
    progress({
      stage: "checkpoint",
      message: `kept ${view.kind} checkpoint ${view.id}${view.label ? ` (${view.label})` : ""}${
        stallMs !== undefined ? `; the guest's disk waited ${Math.round(stallMs)} ms` : ""
      }${pauseMs !== undefined ? `; paused ${(pauseMs / 1000).toFixed(1)} s` : ""}`,
    });
    this.state.log.info(
      `kept checkpoint ${view.id} (${view.kind}${view.label ? `, ${JSON.stringify(view.label)}` : ""})`,
    );
    return {
      name: this.name,
      checkpoint: view,
      ...(stallMs !== undefined ? { stallMs } : {}),
      ...(pauseMs !== undefined ? { pauseMs } : {}),
      pruned: pruned.map(checkpointView),
    };
  }

  /**
   * A new checkpoint id, under which the guest's workspace is recorded first (its own store, on the
   * disk about to be kept: what `diff --since` compares with), with the large files the record
   * left out. A guest that cannot record it (no git) still gets its checkpoint; the progress says
   * why diff will not have it.
   */
  private async namedInGuest(progress: Progress): Promise<{ id: string; leftOut?: WorkspaceLeftOut }> {
    const id = randomBytes(6).toString("hex");
    const supervisor = this.state.supervisor;
    if (!supervisor) return { id };
    try {
      const { leftOut } = await snapshotWorkspace(supervisor, supervisor.workspace, { ref: checkpointRef(id) });
      if (leftOut) progress({ stage: "checkpoint", message: leftOutText(leftOut) });
      return { id, ...(leftOut ? { leftOut } : {}) };
    } catch (error) {
      progress({
        stage: "checkpoint",
        message: `the workspace was not recorded for diff --since: ${messageOf(error)}`,
      });
      return { id };
    }
  }

  /**
   * Keeps a checkpoint of the running instance, its workspace recorded under it first (unless not
   * `workspace`: one only forks are made of): of its disk, or with `keep.memory` of its memory
   * too, saved while it runs (paused `pauseMs` for the last of it). `keep.extra` is the
   * controller's own (see {@link KeptExtra}).
   */
  private async keepRunning(
    keep: KeepOptions & { extra?: KeptExtra },
    progress: Progress,
    options: { workspace: boolean } = { workspace: true },
  ): Promise<{ kept: KeptCheckpoint; stallMs: number; pauseMs?: number }> {
    const { id, leftOut } = options.workspace
      ? await this.namedInGuest(progress)
      : { id: undefined, leftOut: undefined };
    const extra: KeptExtra = { ...keep.extra, ...(leftOut ? { leftOut } : {}) };
    const outcome = await this.state.running().vm.checkpoint({
      keep: { ...keep, ...(id !== undefined ? { id } : {}), ...(Object.keys(extra).length > 0 ? { extra } : {}) },
    });
    if (!outcome.kept) throw new ControllerError("CONTROLLER_INTERNAL", "the VM took a checkpoint but did not keep it");
    return {
      kept: outcome.kept,
      stallMs: outcome.stallMs,
      ...(outcome.pauseMs !== undefined ? { pauseMs: outcome.pauseMs } : {}),
    };
  }

  /** Removes the oldest unpinned checkpoints beyond `checkpoint.keep`/`keepGiB`, never `keep`. */
  private async prune(record: EntryRecord, keep: string): Promise<KeptCheckpointInfo[]> {
    const kept = await this.runtime.disks.checkpoints(this.diskDir);
    const prune = checkpointsToPrune(kept, checkpointKeepOf(record.config), keep);
    for (const k of prune) {
      await this.runtime.disks.removeCheckpoint(this.diskDir, k.id);
      this.state.log.info(`removed checkpoint ${k.id} (checkpoint.keep/keepGiB)`);
    }
    return prune;
  }

  async removeCheckpoint(target: string, progress: Progress): Promise<{ name: string; removed: CheckpointView }> {
    await this.record("remove a checkpoint");
    const found = findCheckpoint(await this.runtime.disks.checkpoints(this.diskDir), target, this.name);
    await this.runtime.disks.removeCheckpoint(this.diskDir, found.id);
    progress({ stage: "checkpoint", message: `removed checkpoint ${found.id}` });
    this.state.log.info(`removed checkpoint ${found.id}`);
    return { name: this.name, removed: checkpointView(found) };
  }

  async rewind(
    target: string,
    progress: Progress,
  ): Promise<EntryView & { rewound: CheckpointView; before?: CheckpointView }> {
    await this.record("rewind");
    const found = findCheckpoint(await this.runtime.disks.checkpoints(this.diskDir), target, this.name);
    const label = `before rewind to ${found.label ?? found.id}`;
    let before: KeptCheckpoint;
    // The state being left is kept first: a rewind can itself be undone.
    if (this.state.vm) {
      progress({ stage: "checkpoint", message: "keeping the current state first" });
      before = (await this.keepRunning({ label }, progress)).kept;
      progress({ stage: "stop", message: "stopping the guest" });
      // Nothing was written since that checkpoint: the run is dropped, not merged.
      await this.lifecycle.teardown({ checkpoint: false });
    } else {
      // An instance that suspended itself: its daemon still holds the previews.
      await this.lifecycle.closePreviews();
      const suspended = await this.suspended();
      const status = suspended ? await readStatus(this.state.layout, "instances", this.name) : undefined;
      before = await this.runtime.disks.keepCheckpoint(this.diskDir, {
        label,
        ...(suspended ? { memory: true, extra: await this.extra(status?.previews) } : {}),
      });
    }
    progress({
      stage: "checkpoint",
      message: `rewinding ${this.name} to ${found.memory ? "memory" : "disk"} checkpoint ${found.id}`,
    });
    this.state.log.info(`rewinding to checkpoint ${found.id}; the state left is checkpoint ${before.id}`);
    await this.runtime.disks.rewind(this.diskDir, found.id);
    const extra = (found.extra ?? {}) as KeptExtra;
    if (found.memory) await writeAgentDoor(this.state.layout, "instances", this.name, extra.agentDoor);
    await this.state.setState(found.memory ? "suspended" : "stopped", {
      previews: found.memory ? (extra.previews ?? []) : [],
    });
    const view = await this.lifecycle.start(progress);
    await this.prune((await readRecord(this.state.layout, "instances", this.name))!, before.id);
    const all = await this.runtime.disks.checkpoints(this.diskDir);
    const beforeView = all.find((k) => k.id === before.id);
    return {
      ...view,
      rewound: checkpointView(found),
      ...(beforeView ? { before: checkpointView(beforeView) } : {}),
    };
  }

  /**
   * Forks the instance into `names`: as it is now (a running one is paused for the copy of its
   * memory), or, with `from`, as its kept checkpoint of that id or label was (nothing is paused).
   */
  async fork(names: readonly string[], progress: Progress, from?: string): Promise<ForkResult> {
    const origin: ForkOrigin = {
      name: this.name,
      layout: this.state.layout,
      runtime: this.runtime,
      record: await this.record("be forked"),
    };
    await checkForkNames(origin, names);
    let result: ForkResult;
    if (from !== undefined) {
      const kept = findCheckpoint(await this.runtime.disks.checkpoints(this.diskDir), from, this.name);
      progress({ stage: "disk", message: `forking ${kept.memory ? "memory" : "disk"} checkpoint ${kept.id}` });
      const forks = await makeForks(origin, names, { kind: "checkpoint", kept }, progress);
      result = { source: this.name, forks, from: checkpointView(kept) };
    } else if (this.state.vm) {
      // Its memory saved while it runs, as a kept checkpoint the forks are made of, then dropped
      // (the forks hold its files by their own links).
      progress({ stage: "checkpoint", message: `saving ${this.name}'s memory while it runs` });
      const extra = await this.extra(this.state.status.previews);
      const { kept, pauseMs } = await this.keepRunning({ memory: true, extra }, progress, { workspace: false });
      try {
        const forks = await makeForks(origin, names, { kind: "checkpoint", kept }, progress);
        result = { source: this.name, forks, ...(pauseMs !== undefined ? { pauseMs } : {}) };
      } finally {
        await this.runtime.disks.removeCheckpoint(this.diskDir, kept.id).catch(() => undefined);
      }
    } else {
      const status = await readStatus(this.state.layout, "instances", this.name);
      const previews = status?.state === "suspended" ? status.previews : undefined;
      result = { source: this.name, forks: await makeForks(origin, names, { kind: "now", previews }, progress) };
    }
    this.state.log.info(`forked into ${names.join(", ")}${result.from ? ` from checkpoint ${result.from.id}` : ""}`);
    return result;
  }
}
