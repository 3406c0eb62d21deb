// An entry's record.json and status.json: their types, atomic writes and reads.
import { readdir } from "node:fs/promises";
import {
  CONFIG_DEFAULTS,
  isValidInstanceName,
  writeJsonAtomic,
  type CheckpointConfig,
  type SandboxConfig,
} from "@pi-sandbox/config/core";
import { readJson } from "./read-json.js";
import type { EntryKind, StateLayout } from "./layout.js";

/** Lifecycle states of an entry. */
export type EntryState =
  | "starting"
  | "running"
  | "stopping"
  | "stopped"
  | "suspending"
  | "suspended"
  | "prepared"
  | "failed"
  | "interrupted"
  | "unavailable";

/**
 * How the last start used the memory a `suspend` saved: resumed (`warm`, processes ran on), or
 * booted cold from the same checkpoint, with the reason the memory could not be used.
 */
/** How long a start took, from the daemon taking it to `running` (setup included on a create), in ms. */
export interface LastStart {
  /** When it reached running, ISO time. */
  at: string;
  /** Its duration in ms. */
  ms: number;
  /** True when it resumed the memory a suspend saved. */
  warm: boolean;
}

export type RestoreInfo = { warm: true; restoreMs: number } | { warm: false; reason: string };

/** The last automatic checkpoint of a running instance (`checkpoint.every`). */
export interface LastCheckpoint {
  /** When it was taken, ISO time: the disk as of then is the current checkpoint. */
  at: string;
  /** The checkpoint generation it made current (or found current, when nothing was written since). */
  generation: number;
  /** Milliseconds the guest's disk I/O waited for it. */
  stallMs: number;
}

/**
 * `checkpoint.every` of a config in ms, null when off. A record written before the key existed has
 * none: it gets the default, as a new config would.
 */
export function checkpointEveryOf(config: SandboxConfig): number | null {
  const checkpoint = config.checkpoint as CheckpointConfig | undefined;
  return checkpoint === undefined ? CONFIG_DEFAULTS.checkpointEveryMs : checkpoint.everyMs;
}

/** `checkpoint.keep` and `keepGiB` of a config, the defaults where it has none. */
export function checkpointKeepOf(config: SandboxConfig): { count: number; bytes: number } {
  const checkpoint = config.checkpoint as CheckpointConfig | undefined;
  return {
    count: checkpoint?.keep ?? CONFIG_DEFAULTS.checkpointKeep,
    bytes: (checkpoint?.keepGiB ?? CONFIG_DEFAULTS.checkpointKeepGiB) * 2 ** 30,
  };
}

/**
 * What a start found of a run whose controller died (SIGKILL, OOM, a host reboot): its disk layer
 * became the checkpoint it reopened (`recovered`, crash-consistent like a power cut), or it could
 * not be used and was moved aside (`set-aside`), the last checkpoint reopened instead.
 */
export interface RecoveryInfo {
  outcome: "recovered" | "set-aside";
  /** ISO time of the interrupted run's last disk write. */
  lastWriteAt: string;
  /** The checkpoint reopened: its generation and ISO time. */
  reopened: { generation: number; at: string };
  /** When this start found it. */
  at: string;
}

/** A disk layer moved aside because it could not be used: kept until the user removes it. */
export interface SetAsideLayer {
  /** Where it is on the host. */
  path: string;
  /** Host bytes. */
  bytes: number;
  /** ISO time it was set aside. */
  at: string;
  /** ISO time of its last write. */
  lastWriteAt: string;
  /** Why it was not used. */
  reason: string;
}

/** What an instance or template is: written once at creation. */
export interface EntryRecord {
  /** Namespace. */
  kind: EntryKind;
  /** Entry name. */
  name: string;
  /** ISO time of creation. */
  createdAt: string;
  /** Host path of the sandbox.yaml it was made from, if any. */
  configPath?: string;
  /** Template it was created from, if any. */
  template?: string;
  /** The config captured at creation (hardware, network, setup, resume). */
  config: SandboxConfig;
  /**
   * Salt of the secret placeholders the guest sees (`network.secrets`): fixed at creation (an
   * instance made from a template takes the template's, so files its setup wrote keep working).
   * Records written before secrets existed get one at their next start.
   */
  secretSalt?: string;
  /**
   * Present until the first boot of a new instance finished (guest config written, setup run).
   * A create whose daemon died before then is finished by the next `start`; `configText` is the
   * host sandbox.yaml text to write into the guest (absent for a template's copy). `newIdentity`
   * gives the guest its own machine-id, hostname and ssh host keys (records of older versions
   * have it only for a template's copy).
   */
  pendingCreate?: {
    configText?: string;
    newIdentity?: boolean;
    /** The disk is new from an image: no agent on it yet, so its boot gets the agent's seed. */
    freshDisk?: boolean;
    /** A fork's first start: only the identity is new (setup ran in the instance it was forked from). */
    fork?: true;
  };
  /** The instance this one was forked from (`fork`), and when. */
  forkedFrom?: { name: string; at: string };
}

/** One error kept for inspect. */
export interface RecordedError {
  /** Stable code. */
  code: string;
  /** What happened. */
  message: string;
  /** What to do next. */
  hint?: string;
  /** When, ISO time. */
  at: string;
}

/** A preview link as returned to users. */
export interface PreviewLinkInfo {
  /** Service (or `port-N` for an ad-hoc preview). */
  service: string;
  /** URL the user opens. */
  url: string;
  /** Link title. */
  title: string;
  /** Optional description. */
  description?: string;
  /** Folder the link is grouped under. */
  folder?: string;
}

/** The daemon's last word about an entry: rewritten atomically on every transition. */
export interface EntryStatus {
  /** Last state the daemon recorded. */
  state: EntryState;
  /** ISO time of the last update. */
  updatedAt: string;
  /** Daemon pid while one owns the entry. */
  daemonPid?: number;
  /** QEMU pid while a VM runs. */
  qemuPid?: number;
  /** Accelerator in use: kvm, hvf or tcg. */
  accelerator?: string;
  /** Why that accelerator (e.g. why not KVM). */
  acceleratorReason?: string;
  /** Preview links while running; while suspended, the ones a warm start reopens. */
  previews?: PreviewLinkInfo[];
  /** The loopback address previews bind; `shared` says why it is the shared 127.0.0.1. */
  previewAddress?: { address: string; shared?: string };
  /** Set by a start that found saved memory (after a suspend): whether it resumed, else why not. */
  restore?: RestoreInfo;
  /** Set by a start that found a run its controller never finished: what it reopened. */
  recovery?: RecoveryInfo;
  /** Disk layers set aside by such starts, kept until the user removes them. */
  setAside?: SetAsideLayer[];
  /** The last start (or create): when it reached running, how long it took, and whether it resumed saved memory. */
  lastStart?: LastStart;
  /** The last automatic checkpoint of this run (`checkpoint.every`); kept after a crash, dropped by the next start. */
  lastCheckpoint?: LastCheckpoint;
  /** Startup, setup, resume or readiness problems. */
  errors?: RecordedError[];
  /** Setup result at creation; `logPath` is its full output in the guest (the newest 3 setup logs are kept). */
  setup?: { exitCode: number | null; timedOut?: boolean; at: string; logPath?: string };
  /** Handle of a resume hook still running in the background. */
  resumePid?: string;
  /**
   * `idle` when the instance suspended itself after `idle.suspendAfter` unused: its previews stay
   * bound (by its daemon, then by the state root's waker once the daemon parked it and exited), and
   * the next preview request or action resumes it.
   */
  suspendedBy?: "idle";
  /**
   * A template prepared with `suspend`: the bytes of the memory it saved with its services
   * running, which each instance made from it resumes instead of booting.
   */
  savedMemory?: { bytes: number };
}

/** Reads the record, or undefined when the entry does not exist. */
export function readRecord(layout: StateLayout, kind: EntryKind, name: string): Promise<EntryRecord | undefined> {
  return readJson<EntryRecord>(layout.recordFile(kind, name));
}

/** Writes the record atomically. */
export function writeRecord(layout: StateLayout, record: EntryRecord): Promise<void> {
  return writeJsonAtomic(layout.recordFile(record.kind, record.name), record);
}

/** Drops an instance's `pendingCreate`: its disk holds the first boot's work now (a no-op without one). */
export async function completePendingCreate(layout: StateLayout, name: string): Promise<void> {
  const record = await readRecord(layout, "instances", name);
  if (!record?.pendingCreate) return;
  const { pendingCreate: _done, ...created } = record;
  await writeRecord(layout, created);
}

/** Reads the status file, or undefined. */
export function readStatus(layout: StateLayout, kind: EntryKind, name: string): Promise<EntryStatus | undefined> {
  return readJson<EntryStatus>(layout.statusFile(kind, name));
}

/** Writes the status atomically. */
export function writeStatus(layout: StateLayout, kind: EntryKind, name: string, status: EntryStatus): Promise<void> {
  return writeJsonAtomic(layout.statusFile(kind, name), status);
}

/** Names of entries of one kind that have a record (half-created dirs without one are skipped). */
export async function listEntryNames(layout: StateLayout, kind: EntryKind): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(layout.kindDir(kind));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw error;
  }
  return names.filter((n) => isValidInstanceName(n)).sort();
}
