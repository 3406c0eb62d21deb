// `inspect` and `list` from the state files alone: an entry's view, with a dead daemon read as
// interrupted.
import { access } from "node:fs/promises";
import type { QemuResidentMemory } from "@pi-sandbox/vm/host";
import { ControllerError } from "../errors.js";
import { daemonLive, daemonPing, type Pong } from "./liveness.js";
import { wakerHolding } from "./waker-call.js";
import { listCheckpoints, type CheckpointView } from "./checkpoints.js";
import type { EntryKind, StateLayout } from "./layout.js";
import {
  checkpointEveryOf,
  listEntryNames,
  readRecord,
  readStatus,
  type EntryState,
  type EntryStatus,
  type PreviewLinkInfo,
  type RecordedError,
  type LastCheckpoint,
  type LastStart,
  type RecoveryInfo,
  type RestoreInfo,
  type SetAsideLayer,
} from "./records.js";

/** What `inspect` returns (and `list` returns one of per entry). */
export interface EntryView {
  /** Entry name. */
  name: string;
  /** Namespace. */
  kind: EntryKind;
  /** Derived state: a status whose daemon is gone reads `interrupted`. */
  state: EntryState;
  /** ISO creation time. */
  createdAt: string;
  /** Template it came from. */
  template?: string;
  /** vCPUs and memory captured at creation. */
  resources: { cpus: number; memoryGiB: number };
  /** Disk capacity (sparse). */
  diskGiB: number;
  /** Host `127.0.0.1` ports the guest reaches as `host.sandbox.internal:<port>` (`network.hostPorts`). */
  hostPorts: number[];
  /** Credentials kept on the host (`network.secrets`): names and hosts only, never a source's value. */
  secrets?: { name: string; hosts: string[] }[];
  /** Host directories the guest reads but cannot write (`mounts`), as declared. */
  mounts?: { host: string; guest: string }[];
  /** Accelerator of the current or last run. */
  accelerator?: string;
  /** Why that accelerator was used (e.g. why not KVM). */
  acceleratorReason?: string;
  /** Preview links while running. */
  previews: PreviewLinkInfo[];
  /**
   * The loopback address of this instance's previews (its own browser origin, so its own cookie
   * jar); `shared` is set, with the reason, when previews fell back to the shared 127.0.0.1.
   */
  previewAddress?: { address: string; shared?: string };
  /** Recorded problems. */
  errors: RecordedError[];
  /** Setup outcome. */
  setup?: EntryStatus["setup"];
  /** Whether the last start resumed the memory a suspend saved, or booted cold and why. */
  restore?: RestoreInfo;
  /** What the last start found of a run whose controller died: recovered, or set aside. */
  recovery?: RecoveryInfo;
  /** Disk layers set aside by such starts that are still on the host, until the user removes them. */
  setAside?: SetAsideLayer[];
  /** The last start (or create): when it reached running, how long it took, warm or cold. */
  lastStart?: LastStart;
  /**
   * Automatic checkpoints of an instance (`checkpoint.every`): the setting in ms (null: off), and
   * the last one its current (or last) run took, which is what a crash would fall back to at worst.
   */
  checkpoint?: { everyMs: number | null; last?: LastCheckpoint };
  /** Kept checkpoints (`checkpoint`): how many, the host bytes only they hold, and the newest. */
  kept?: { count: number; bytes: number; newest: CheckpointView };
  /** The instance this one was forked from, and when. */
  forkedFrom?: { name: string; at: string };
  /** Background resume handle for exec-status. */
  resumePid?: string;
  /** A template prepared with `suspend`: the memory it saved, which instances made from it resume. */
  savedMemory?: { bytes: number };
  /**
   * What the instance's QEMU costs the host now, while it runs: CPU in percent of one host CPU
   * (over a 200 ms window) and resident memory in bytes, for inspect also where that memory is.
   * Read from /proc; absent without a QEMU.
   */
  usage?: { cpuPercent: number; rssBytes: number; memory?: QemuResidentMemory };
  /**
   * Auto-suspend (`idle.suspendAfter`, or `--idle-suspend`): the setting, and from a live daemon
   * its clock, or that the instance suspended itself (its previews and actions resume it).
   */
  idle?: IdleView;
  /** Daemon pid when live. */
  daemonPid?: number;
  /** What to do next, when the state calls for it. */
  hint?: string;
}

/** An instance's auto-suspend, as inspect and list show it. */
export interface IdleView {
  /** It suspends itself after this long unused, in ms. */
  suspendAfterMs: number;
  /** While it runs: how long nothing has used it, in ms (0 while something does). */
  idleForMs?: number;
  /** While it runs and something uses it: what (the daemon's last look). */
  busy?: string;
  /**
   * True while it is suspended by this setting, its previews held to wake it: by its daemon, or
   * (parked, its daemon gone) by the state root's waker.
   */
  suspended?: true;
}

const ACTIVE: ReadonlySet<EntryState> = new Set(["starting", "running", "stopping", "suspending"]);

/** CONTROLLER_NOT_FOUND for an entry with no record, with a hint to list the existing ones. */
export function notFound(kind: EntryKind, name: string): ControllerError {
  return new ControllerError(
    "CONTROLLER_NOT_FOUND",
    `no ${kind === "templates" ? "template" : "instance"} named ${name}`,
    {
      hint:
        kind === "templates"
          ? 'List templates with {"action":"list","kind":"templates"}.'
          : 'List instances with {"action":"list"}.',
      details: { name, kind },
    },
  );
}

/** Builds the view of one entry from its files and the daemon's liveness; never trusts a stale status. */
export async function inspectEntry(layout: StateLayout, kind: EntryKind, name: string): Promise<EntryView> {
  const record = await readRecord(layout, kind, name);
  if (!record) throw notFound(kind, name);
  const status = await readStatus(layout, kind, name);
  const liveness = await daemonLive(layout.pidFile(kind, name), layout.socketPath(kind, name));
  let state: EntryState = status?.state ?? (kind === "templates" ? "failed" : "stopped");
  let hint: string | undefined;
  const errors = [...(status?.errors ?? [])];
  // Only an answer shows the daemon itself is working (and tells its idle clock).
  const pong: Pong | undefined = liveness.live ? await daemonPing(layout.socketPath(kind, name)) : undefined;
  if (ACTIVE.has(state) && !liveness.live) {
    state = "interrupted";
    hint = `The controller of ${name} is gone (crash or kill). Run {"action":"start","name":"${name}"} to reopen its last completed checkpoint.`;
  } else if (ACTIVE.has(state) && !pong) {
    state = "unavailable";
    hint = `The controller of ${name} (pid ${liveness.pid}) is alive but does not answer: it may be stopped (SIGSTOP) or overloaded. Wait and inspect again, or end it (kill ${liveness.pid}) and run {"action":"start","name":"${name}"}.`;
  } else if (!ACTIVE.has(state) && record.config.image) {
    try {
      await access(record.config.image);
    } catch {
      errors.push({
        code: "CONTROLLER_IMAGE_MISSING",
        message: `the image assets at ${record.config.image} are gone; ${name} cannot boot without them`,
        hint: "Restore them at that path to reopen it.",
        at: new Date().toISOString(),
      });
    }
  }
  // Suspended by its idle clock, its daemon (or, parked, the waker) holding the previews: they (and
  // actions) wake it. Nothing holding them (killed meanwhile) leaves an ordinary suspended instance.
  const idleSuspended = state === "suspended" && status?.suspendedBy === "idle";
  const asleep = idleSuspended && (pong !== undefined || (await wakerHolding(layout)).has(name));
  if (!hint && state === "failed") hint = `See {"action":"logs","name":"${name}"} for the controller log.`;
  const view: EntryView = {
    name,
    kind,
    state,
    createdAt: record.createdAt,
    resources: record.config.resources,
    diskGiB: record.config.diskGiB,
    // A record written before network.hostPorts existed has none.
    hostPorts: [...(record.config.network?.hostPorts ?? [])],
    previews: state === "running" || asleep ? (status?.previews ?? []) : [],
    errors,
  };
  const suspendAfterMs = record.config.idle?.suspendAfterMs;
  if (suspendAfterMs !== undefined && kind === "instances") {
    view.idle = { suspendAfterMs, ...(asleep ? { suspended: true as const } : {}), ...(pong?.idle ?? {}) };
  }
  // Records written before network.secrets and mounts existed have neither.
  const secrets = Object.entries(record.config.network?.secrets ?? {});
  if (secrets.length > 0) view.secrets = secrets.map(([secret, { hosts }]) => ({ name: secret, hosts: [...hosts] }));
  const mounts = record.config.mounts ?? [];
  if (mounts.length > 0) view.mounts = mounts.map((mount) => ({ host: mount.host, guest: mount.guest }));
  if (record.template) view.template = record.template;
  if (status?.accelerator) view.accelerator = status.accelerator;
  if (status?.acceleratorReason) view.acceleratorReason = status.acceleratorReason;
  if (status?.setup) view.setup = status.setup;
  if (status?.previewAddress && kind === "instances") view.previewAddress = status.previewAddress;
  // Of the last start; a suspend since then makes it moot.
  if (status?.restore && state !== "suspended" && state !== "suspending") view.restore = status.restore;
  if (status?.lastStart) view.lastStart = status.lastStart;
  if (kind === "instances") {
    view.checkpoint = {
      everyMs: checkpointEveryOf(record.config),
      // A stop or suspend since then took a checkpoint of its own: the automatic one is moot.
      ...(status?.lastCheckpoint && state !== "stopped" && state !== "suspended"
        ? { last: status.lastCheckpoint }
        : {}),
    };
  }
  if (kind === "instances") {
    const kept = await listCheckpoints(layout, name).catch(() => []);
    if (kept.length > 0)
      view.kept = { count: kept.length, bytes: kept.reduce((sum, k) => sum + k.bytes, 0), newest: kept.at(-1)! };
  }
  if (record.forkedFrom) view.forkedFrom = record.forkedFrom;
  if (status?.recovery) view.recovery = status.recovery;
  // Removed by the user meanwhile: no longer listed.
  const kept = await keptLayers(status?.setAside ?? []);
  if (kept.length > 0) view.setAside = kept;
  if (status?.resumePid && state === "running") view.resumePid = status.resumePid;
  if (status?.savedMemory && kind === "templates") view.savedMemory = status.savedMemory;
  if (liveness.live && liveness.pid) view.daemonPid = liveness.pid;
  if (hint) view.hint = hint;
  return view;
}

/** The set-aside layers still on the host. */
async function keptLayers(layers: readonly SetAsideLayer[]): Promise<SetAsideLayer[]> {
  const present = await Promise.all(
    layers.map((layer) =>
      access(layer.path).then(
        () => true,
        () => false,
      ),
    ),
  );
  return layers.filter((_, i) => present[i]);
}

/** Views of every entry of a kind; entries without a readable record are skipped. */
export async function listEntries(layout: StateLayout, kind: EntryKind): Promise<EntryView[]> {
  const views: EntryView[] = [];
  for (const name of await listEntryNames(layout, kind)) {
    try {
      views.push(await inspectEntry(layout, kind, name));
    } catch (error) {
      if (error instanceof ControllerError && error.code === "CONTROLLER_NOT_FOUND") continue;
      throw error;
    }
  }
  return views;
}
