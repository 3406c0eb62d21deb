// Branches of one instance's state: kept checkpoints (taken while it runs or not), a rewind to one,
// and forks into new instances. Each runs alone in the instance's lifecycle queue (instance.ts).
// The disk side (hard-linked layer chains, saved memory) is the vm package's; here is what the
// instance around it needs: its status, previews and agent door, its record, and a pause (suspend,
// then a warm start) where memory is copied from a running guest.

import { randomBytes } from "node:crypto";
import { mkdir, rm } from "node:fs/promises";
import { isValidInstanceName, messageOf } from "@pi-sandbox/config";
import type { AgentDoor } from "@pi-sandbox/supervisor";
import type { BranchActions, CheckpointTaken, CheckpointView, ForkResult } from "../actions/kit/context.js";
import { ControllerError } from "../errors.js";
import { checkpointView, checkpointsToPrune, findCheckpoint } from "../state/checkpoints.js";
import { notFound, type EntryView } from "../state/inspect.js";
import {
  checkpointKeepOf,
  completePendingCreate,
  readRecord,
  readStatus,
  writeRecord,
  writeStatus,
  type EntryRecord,
  type PreviewLinkInfo,
} from "../state/records.js";
import type { ProgressEvent } from "../wire.js";
import { readAgentDoor, writeAgentDoor } from "./agent-door.js";
import type { Lifecycle } from "./lifecycle.js";
import type { InstanceRuntime, KeepOptions, KeptCheckpoint, KeptCheckpointInfo } from "./runtime.js";
import { checkpointRef, snapshotWorkspace } from "./workspace-snapshots.js";
import { toControllerError, type InstanceState } from "./state.js";

type Progress = (event: ProgressEvent) => void;

/** What the controller keeps with a memory checkpoint: what a warm start of it reopens. */
interface KeptExtra {
  agentDoor?: AgentDoor;
  previews?: PreviewLinkInfo[];
}

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
      fork: (names) => queue(() => this.fork(names, progress)),
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
      const previews = this.state.status.previews;
      const id = await this.namedInGuest(progress);
      const paused = await this.whileSuspended(progress, async () =>
        this.runtime.disks.keepCheckpoint(this.diskDir, {
          ...keep,
          id,
          memory: true,
          extra: await this.extra(previews),
        }),
      );
      kept = paused.result;
      pauseMs = paused.pauseMs;
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
   * disk about to be kept: what `diff --since` compares with). A guest that cannot record it
   * (no git) still gets its checkpoint; the progress says why diff will not have it.
   */
  private async namedInGuest(progress: Progress): Promise<string> {
    const id = randomBytes(6).toString("hex");
    const supervisor = this.state.supervisor;
    if (supervisor) {
      await snapshotWorkspace(supervisor, supervisor.workspace, { ref: checkpointRef(id) }).catch((error: unknown) =>
        progress({
          stage: "checkpoint",
          message: `the workspace was not recorded for diff --since: ${messageOf(error)}`,
        }),
      );
    }
    return id;
  }

  /** Keeps a disk checkpoint of the running instance (its workspace recorded under it first). */
  private async keepRunning(keep: KeepOptions, progress: Progress): Promise<{ kept: KeptCheckpoint; stallMs: number }> {
    const id = await this.namedInGuest(progress);
    const outcome = await this.state.running().vm.checkpoint({ keep: { ...keep, id } });
    if (!outcome.kept) throw new ControllerError("CONTROLLER_INTERNAL", "the VM took a checkpoint but did not keep it");
    return { kept: outcome.kept, stallMs: outcome.stallMs };
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

  async fork(names: readonly string[], progress: Progress): Promise<ForkResult> {
    const record = await this.record("be forked");
    const { layout } = this.state;
    const seen = new Set<string>();
    for (const fork of names) {
      if (!isValidInstanceName(fork)) {
        throw new ControllerError("CONTROLLER_INVALID_NAME", `${JSON.stringify(fork)} is not a valid instance name`, {
          hint: "Use a lowercase letter, then up to 39 of a-z, 0-9, '-'.",
          details: { name: fork },
        });
      }
      if (fork === this.name || seen.has(fork) || (await readRecord(layout, "instances", fork))) {
        throw new ControllerError("CONTROLLER_ALREADY_EXISTS", `an instance named ${fork} already exists`, {
          hint: "Pick names no instance has (pi-sandbox ls lists them).",
          details: { name: fork },
        });
      }
      seen.add(fork);
    }
    const copy = async (previews: readonly PreviewLinkInfo[] | undefined) => {
      const made: ForkResult["forks"] = [];
      try {
        for (const fork of names) {
          made.push({ name: fork, kind: await this.forkOne(fork, record, previews) });
          progress({ stage: "disk", message: `forked ${this.name} into ${fork}` });
        }
      } catch (error) {
        for (const { name } of [...made, { name: names[made.length]! }]) await this.removeFork(name);
        throw error;
      }
      return made;
    };
    let result: ForkResult;
    if (this.state.vm) {
      const previews = this.state.status.previews;
      const paused = await this.whileSuspended(progress, () => copy(previews));
      result = { source: this.name, forks: paused.result, pauseMs: paused.pauseMs };
    } else {
      const status = await readStatus(layout, "instances", this.name);
      result = { source: this.name, forks: await copy(status?.state === "suspended" ? status.previews : undefined) };
    }
    this.state.log.info(`forked into ${names.join(", ")}`);
    return result;
  }

  /** One fork: its disk (memory too, when the source's is saved), record, status and agent door. */
  private async forkOne(
    fork: string,
    record: EntryRecord,
    previews: readonly PreviewLinkInfo[] | undefined,
  ): Promise<"memory" | "disk"> {
    const { layout } = this.state;
    await mkdir(layout.entryDir("instances", fork), { recursive: true, mode: 0o700 });
    const disk = await this.runtime.disks.fork(this.diskDir, layout.diskDir("instances", fork));
    const memory = disk.memoryBytes > 0;
    if (memory) {
      await writeAgentDoor(layout, "instances", fork, await readAgentDoor(layout, "instances", this.name));
    }
    const at = new Date().toISOString();
    const { pendingCreate: _none, forkedFrom: _theirs, template: _template, ...rest } = record;
    await writeRecord(layout, {
      ...rest,
      name: fork,
      createdAt: at,
      forkedFrom: { name: this.name, at },
      pendingCreate: { newIdentity: true, fork: true },
    });
    await writeStatus(layout, "instances", fork, {
      state: memory ? "suspended" : "stopped",
      updatedAt: at,
      previews: memory ? [...(previews ?? [])] : [],
    });
    return memory ? "memory" : "disk";
  }

  /** Removes what a failed fork made of `fork` (nothing of an instance that existed before). */
  private async removeFork(fork: string): Promise<void> {
    const { layout } = this.state;
    const record = await readRecord(layout, "instances", fork).catch(() => undefined);
    if (record && record.forkedFrom?.name !== this.name) return;
    await this.runtime.disks.destroy(layout.diskDir("instances", fork)).catch(() => undefined);
    await rm(layout.entryDir("instances", fork), { recursive: true, force: true }).catch(() => undefined);
  }

  /**
   * Runs `work` while the running instance is suspended (memory and disk saved, previews kept
   * bound, the daemon kept), then resumes it. Returns how long the guest was paused. A suspend that
   * fails leaves the instance failed, as a suspend would; the resume runs whether `work` failed or not.
   */
  private async whileSuspended<T>(progress: Progress, work: () => Promise<T>): Promise<{ result: T; pauseMs: number }> {
    const { state } = this;
    const started = performance.now();
    const previews = state.status.previews ?? [];
    progress({ stage: "suspend", message: `pausing ${this.name} to copy its memory (preview requests wait)` });
    let resumed!: () => void;
    state.paused = new Promise<void>((resolve) => (resumed = resolve));
    const unpause = () => {
      state.paused = undefined;
      resumed();
    };
    try {
      await state.setState("suspending");
      await this.lifecycle.teardown({ checkpoint: true, keepMemory: true, keepPreviews: true });
      await state.setState("suspended", { previews });
    } catch (error) {
      const e = toControllerError(error);
      state.recordError(e.code, e.message, e.hint ?? "The previous checkpoint is kept; start reopens it.");
      await this.lifecycle.closePreviews();
      await state.setState("failed").catch(() => undefined);
      unpause();
      state.finish();
      throw e;
    }
    let result: T;
    try {
      result = await work();
    } finally {
      progress({ stage: "boot", message: `resuming ${this.name}` });
      await this.lifecycle.start(progress).finally(unpause);
    }
    return { result, pauseMs: performance.now() - started };
  }
}
