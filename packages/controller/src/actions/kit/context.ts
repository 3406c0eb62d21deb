// What action handlers may ask of an instance's daemon. Interfaces only: the action modules import
// these as types, so the client loads no VM machinery.

import type { AdHocServiceSpec, ServiceStatus, ServicesResult, SupervisorClient } from "@pi-sandbox/supervisor";
import type { EntryView } from "../../state/inspect.js";
import type { EntryKind } from "../../state/layout.js";
import type { CheckpointView, WorkspaceLeftOut } from "../../state/checkpoints.js";
import type { PreviewLinkInfo } from "../../state/records.js";
import type { Caller } from "../../wire.js";

export type { CheckpointView };

/** A host sandbox.yaml to build from. */
export interface ConfigSource {
  /** Absolute path of the host sandbox.yaml. */
  config?: string;
  /** sha256 its text must have (what a model's caller checked); a file that changed since is refused. */
  configSha256?: string;
}

/** Options of a start. */
export interface StartOptions {
  /** Replaces the instance's `idle.suspendAfter` for good, in ms; 0 turns auto-suspend off. */
  idleSuspendMs?: number;
}

/** Lifecycle operations; each runs alone in the instance's queue. */
export interface LifecycleActions {
  /** Creates the instance from a host sandbox.yaml (absolute path) or a template, then starts it. */
  create(source: ConfigSource & { template?: string; idleSuspendMs?: number }): Promise<EntryView>;
  /** Boots a fresh disk from a sandbox.yaml, runs setup, saves it as a template. */
  prepare(source: ConfigSource & { config: string; suspend?: boolean }): Promise<EntryView>;
  /** Reopens the last checkpoint (or does nothing when running). */
  start(options?: StartOptions): Promise<EntryView>;
  /** Cuts clients, stops services, checkpoints the disk. */
  stop(): Promise<EntryView>;
  /** Cuts clients, saves the guest's memory with a checkpoint; the next start resumes it. */
  suspend(): Promise<EntryView>;
  /** Removes the entry for good; `confirm` must equal the name. */
  destroy(confirm: string): Promise<{ destroyed: string; kind: EntryKind }>;
}

/** What `checkpoint` took. */
export interface CheckpointTaken {
  name: string;
  checkpoint: CheckpointView;
  /** Milliseconds the guest's disk I/O waited (a disk checkpoint of a running instance). */
  stallMs?: number;
  /** Milliseconds the instance was paused (a memory checkpoint of a running instance: suspend and resume). */
  pauseMs?: number;
  /** Older unpinned checkpoints removed to stay within `checkpoint.keep` and `keepGiB`. */
  pruned: CheckpointView[];
}

/** What `fork` made. */
export interface ForkResult {
  /** The instance forked. */
  source: string;
  /** The new instances, each with its own disk, record and identity-to-be. */
  forks: { name: string; kind: "memory" | "disk" }[];
  /** Milliseconds the source was paused (running: suspended and resumed around the copy). */
  pauseMs?: number;
  /** The kept checkpoint the forks are of (none: of the source as it was). */
  from?: CheckpointView;
  /** Each fork's start, when the caller started them (the client does, after the daemon answers). */
  started?: EntryView[];
}

/** Kept checkpoints, rewind and fork; each runs alone in the instance's queue like the lifecycle. */
export interface BranchActions {
  /** Keeps the instance's state now (disk; with `memory`, its memory too). */
  checkpoint(options: { label?: string; memory?: boolean; pin?: boolean }): Promise<CheckpointTaken>;
  /** Removes a kept checkpoint (id or label). */
  removeCheckpoint(target: string): Promise<{ name: string; removed: CheckpointView }>;
  /**
   * Brings the instance back to a kept checkpoint (id or label) and starts it; the state it left
   * is kept first as a checkpoint of its own (`before`).
   */
  rewind(target: string): Promise<EntryView & { rewound: CheckpointView; before?: CheckpointView }>;
  /**
   * Copies the instance (memory too while it runs or is suspended) into new instances, not started;
   * with `from`, its kept checkpoint of that id or label (memory too, if kept), without a pause.
   */
  fork(names: readonly string[], options?: { from?: string }): Promise<ForkResult>;
}

/** A services result with the instance's preview links. */
export type ServicesView = ServicesResult & { previews: PreviewLinkInfo[] };

/** What a workspace patch is measured from (`diff`, `apply`). */
export type WorkspaceBase =
  /** The workspace as the instance's create left it, after setup. */
  | { kind: "created" }
  /** The workspace when kept checkpoint `id` was taken (of a running instance). */
  | { kind: "checkpoint"; id: string; label?: string }
  /** Another instance's workspace now (a fork). */
  | { kind: "instance"; name: string };

/** A patch of the guest workspace as the guest made it: untrusted bytes, checked by the caller. */
export interface WorkspacePatchBytes {
  /** `git diff --binary -M --full-index` output. */
  patch: Buffer;
  /** The snapshot of the workspace now (40 hex digits). */
  commit: string;
  /** The snapshot it was compared with. */
  baseCommit: string;
  /** Large files the base's record left out: the patch leaves them out too. */
  leftOut?: WorkspaceLeftOut;
}

/** What `workspace-export` wrote for another instance's `diff --against`. */
export interface WorkspaceExport {
  name: string;
  /** The snapshot of the workspace (40 hex digits). */
  commit: string;
  /** False when no bundle was written: the receiver holds the snapshot already. */
  bundled: boolean;
  /** Bytes of the bundle. */
  bytes: number;
}

/** Operations on the running guest; each throws CONTROLLER_NOT_RUNNING when no VM runs. */
export interface GuestActions {
  /** The guest agent's client. */
  supervisor(): SupervisorClient;
  /** Starts what is missing (one service, or all) from the guest .sandbox.yaml, with previews. */
  ensureServices(names?: readonly string[]): Promise<ServicesView>;
  /** Restarts services, re-reading their command, cwd, env and health. */
  restartServices(names?: readonly string[]): Promise<ServicesView>;
  /** Stops services. */
  stopServices(names?: readonly string[]): Promise<ServicesResult>;
  /** Status of services, with the preview links. */
  serviceStatus(names?: readonly string[]): Promise<{ services: ServiceStatus[]; previews: PreviewLinkInfo[] }>;
  /** Starts an ad-hoc supervised service, with a preview when asked. */
  startService(
    spec: Omit<AdHocServiceSpec, "publicUrl">,
    preview:
      | {
          links: { url: string; title: string; description?: string; folder?: string }[];
        }
      | undefined,
  ): Promise<{ service: ServiceStatus; previews: PreviewLinkInfo[] }>;
  /** Links an already-listening guest port to a localhost preview. */
  openPreview(spec: { port: number; title?: string; description?: string }): Promise<{ previews: PreviewLinkInfo[] }>;
  /** A temporary ssh command into the guest. */
  shell(user: string): Promise<{ command: string; user: string; port: number }>;
  /**
   * Reads every `network.secrets` source again and gives the running VM the values from its next
   * request on (the placeholders stay); CONTROLLER_SECRET_UNAVAILABLE if one fails (none changes then).
   */
  reloadSecrets(): Promise<{ secrets: { name: string; hosts: string[] }[] }>;
  /**
   * The workspace's changes since `base` as a git patch made in the guest, restricted to `path`
   * (relative to the workspace); CONTROLLER_PATCH_TOO_LARGE above `maxBytes`,
   * CONTROLLER_DIFF_BASE_MISSING when the guest's store has no such base.
   */
  workspacePatch(options: {
    base: WorkspaceBase;
    path?: string;
    maxBytes: number;
    signal?: AbortSignal;
  }): Promise<WorkspacePatchBytes>;
  /** Writes a git bundle of the workspace now to new host file `to`, leaving out what commit `known` holds. */
  exportWorkspace(to: string, options: { known?: string; signal?: AbortSignal }): Promise<WorkspaceExport>;
}

/** The user's answer to a held egress request: this request, this host for this instance, or no. */
export type EgressAnswer = "once" | "instance" | "deny";

/** What an egress answer did. */
export interface EgressAnswered {
  name: string;
  /** The host or `*.` pattern answered about, lower case. */
  host: string;
  answer: EgressAnswer;
  /** The hosts whose held requests it settled, with how many requests each. */
  answered: { host: string; requests: number }[];
  /** Set when the host is now allowed for this instance (kept in its host state). */
  granted?: true;
}

/** Egress approvals of the running instance (daemon/egress-approvals.ts). */
export interface EgressActions {
  /** The user's answer about `host` (a name or `*.` pattern); `by` is who gave it. */
  answer(host: string, answer: EgressAnswer, by: Caller): Promise<EgressAnswered>;
}
