// The state one instance's daemon holds, shared by its lifecycle and guest operations: what runs
// (VM, agent, previews), the status it last wrote, and the errors kept for inspect.

import { rm } from "node:fs/promises";
import { isConfigError } from "@pi-sandbox/config";
import { isImageError } from "@pi-sandbox/image";
import { isIngressError, type PreviewGateway, type TcpConnectable } from "@pi-sandbox/ingress";
import { isSupervisorError, type SupervisorClient } from "@pi-sandbox/supervisor";
import { isVmError, type EgressEvent } from "@pi-sandbox/vm";
import { ControllerError, isControllerError } from "../errors.js";
import { inspectEntry, type EntryView } from "../state/inspect.js";
import type { EntryKind, StateLayout } from "../state/layout.js";
import { readRecord, writeStatus, type EntryState, type EntryStatus, type RecordedError } from "../state/records.js";
import { Ledger, type LedgerKind } from "../state/ledger.js";
import { keepDestroyedLedger } from "../state/ledger-keep.js";
import type { DaemonLogger } from "../log.js";
import { EgressApprovals } from "./egress-approvals.js";
import { EgressBytesTally } from "./egress-bytes.js";
import type { RuntimeVm } from "./runtime.js";

/**
 * For the bench only: a daemon started with PI_SANDBOX_BENCH_NO_LEDGER=toggle writes its ledger
 * until a SIGUSR2 turns it off (the next turns it on again), so the same calls to the same instance
 * can be timed with and without it side by side (bench/ledger-bench.mjs).
 */
let ledgerOff = false;
if (process.env.PI_SANDBOX_BENCH_NO_LEDGER === "toggle") process.on("SIGUSR2", () => (ledgerOff = !ledgerOff));

/** The parts of a running instance. */
export interface RunningParts {
  vm: RuntimeVm;
  supervisor: SupervisorClient;
  gateway: PreviewGateway;
}

/**
 * Converts lower-layer errors into the controller's wire form. A coded error of ours (config,
 * image, vm, supervisor, ingress) keeps its code, hint and details; anything else (a Node system
 * error's `ENOENT`, a bug's TypeError) becomes `CONTROLLER_INTERNAL`, its own code, if any, kept
 * in `details.cause`, so callers switching on `code` meet only codes of the union.
 */
export function toControllerError(error: unknown): ControllerError {
  if (isControllerError(error)) return error;
  if (
    isConfigError(error) ||
    isImageError(error) ||
    isVmError(error) ||
    isSupervisorError(error) ||
    isIngressError(error)
  ) {
    return new ControllerError(error.code, error.message, { hint: error.hint, details: error.details, cause: error });
  }
  const e = error as { code?: unknown; message?: unknown; details?: unknown } | null | undefined;
  const details: Record<string, unknown> =
    typeof e?.details === "object" && e.details !== null ? { ...(e.details as Record<string, unknown>) } : {};
  if (typeof e?.code === "string" || typeof e?.code === "number") details.cause = e.code;
  const message = typeof e?.message === "string" ? e.message : String(error);
  return new ControllerError("CONTROLLER_INTERNAL", message, {
    hint: "An unexpected failure inside the controller: the logs action without a service shows the controller log; inspect shows the instance's state.",
    details: Object.keys(details).length > 0 ? details : undefined,
    cause: error,
  });
}

/** One entry's daemon-side state. */
export class InstanceState {
  vm: RuntimeVm | undefined;
  supervisor: SupervisorClient | undefined;
  gateway: PreviewGateway | undefined;
  status: EntryStatus = { state: "stopped", updatedAt: new Date().toISOString() };
  errors: RecordedError[] = [];
  /** True once the daemon has decided to exit: new calls go to a fresh daemon. */
  exiting = false;
  /** `idle.suspendAfter` of the running instance, in ms (from its record at each start); undefined when off. */
  suspendAfterMs: number | undefined;
  /** `checkpoint.every` of the running instance, in ms (from its record at each start); null when off. */
  checkpointEveryMs: number | null | undefined;
  /** Asked before each preview request is forwarded: resumes an instance that suspended itself. */
  wake: () => Promise<void> | undefined = () => undefined;
  /** Told when a boot resumed the guest from saved memory, before its agent is back. */
  guestResumed: () => void = () => undefined;
  /**
   * The previews' way into the guest: whichever VM runs when a connection is made. The gateway
   * outlives an auto-suspend, so it must not hold on to one run's VM. (A fork or a memory
   * checkpoint saves the memory while the guest runs: QEMU itself holds a connection made during
   * its short final pause.)
   */
  readonly guestPorts: TcpConnectable = {
    connectTcp: async (port, options) => {
      if (this.vm) return this.vm.connectTcp(port, options);
      throw new ControllerError("CONTROLLER_NOT_RUNNING", `${this.name} is not running`, {
        details: { name: this.name },
      });
    },
  };
  /** Resolves when the daemon should exit (after stop, destroy, prepare or a failed start). */
  readonly finished: Promise<void>;
  #finish!: () => void;

  /** The guest's requests held for the user's answer, and the answers (instances only ask). */
  readonly egress: EgressApprovals;

  constructor(
    readonly layout: StateLayout,
    readonly kind: EntryKind,
    readonly name: string,
    readonly log: DaemonLogger,
  ) {
    this.egress = new EgressApprovals({ layout, name, record: (k, data) => this.record(k, data) });
    this.finished = new Promise((resolve) => {
      this.#finish = () => {
        this.exiting = true;
        resolve();
      };
    });
  }

  #ledger: Ledger | undefined;
  /** Where the ledger is: the entry's, or after a destroy where it was kept (null: not kept). */
  #ledgerDir: string | null | undefined;

  /**
   * Appends to the entry's ledger (opened at its first entry). Recording never fails the work it
   * records: a failure is logged (the entry directory removed, a full disk) and the work goes on.
   */
  record(kind: LedgerKind, data: Record<string, unknown>): void {
    if (ledgerOff || this.#ledgerDir === null) return;
    try {
      this.#ledger ??= Ledger.open(this.#ledgerDir ?? this.layout.ledgerDir(this.kind, this.name));
      this.#ledger.append(kind, data);
    } catch (error) {
      this.#ledger = undefined;
      this.log.warn(`could not record ${kind} in the ledger: ${String(error)}`);
    }
  }

  /** Body bytes of the guest's exchanges, one entry per destination per minute at most. */
  readonly #egressBytes = new EgressBytesTally((summary) => this.record("egress-bytes", summary));

  /**
   * Records what the guest's way out did: a request's decision, or a secret put into one (its name
   * only); an exchange's bytes go into the per-minute summary (written at the latest when the
   * instance changes state).
   */
  recordEgress(event: EgressEvent): void {
    const { kind, ...data } = event;
    if (event.kind === "bytes") this.#egressBytes.add(event);
    else this.record(kind === "secret" ? "secret" : "egress", data);
  }

  /**
   * Moves the ledger out of the entry directory before a destroy removes it, its last entry saying
   * so, to be kept as long as the config says (state/ledger-keep.ts); returns where it went
   * (undefined when it is not kept, or there was none).
   */
  async keepLedger(): Promise<string | undefined> {
    const days = (await readRecord(this.layout, this.kind, this.name).catch(() => undefined))?.config.ledger
      ?.keepDestroyedDays;
    if (days !== 0) this.record("lifecycle", { state: "destroyed" });
    this.#ledger = undefined;
    const to = await keepDestroyedLedger(this.layout, this.kind, this.name, days);
    // What the daemon still records (the destroy's own answer) goes after it there, or nowhere.
    this.#ledgerDir = to ?? null;
    return to;
  }

  /** Removes the entry's directory for good (a destroy), its ledger kept first (see keepLedger). */
  async removeEntry(): Promise<void> {
    await this.keepLedger();
    await rm(this.layout.entryDir(this.kind, this.name), { recursive: true, force: true });
  }

  /** Marks the daemon as done. */
  finish(): void {
    this.#egressBytes.flush();
    this.#finish();
  }

  /** Records a transition in status.json (atomically), with the errors and the QEMU pid. */
  async setState(state: EntryState, patch: Partial<EntryStatus> = {}): Promise<void> {
    if (state !== this.status.state) {
      this.#egressBytes.flush();
      this.record("lifecycle", { state, from: this.status.state });
    }
    this.status = {
      ...this.status,
      ...patch,
      state,
      updatedAt: new Date().toISOString(),
      daemonPid: process.pid,
      errors: this.errors,
    };
    // Only a suspended instance can have suspended itself.
    if (state !== "suspended") delete this.status.suspendedBy;
    if (this.vm?.hostPid) this.status.qemuPid = this.vm.hostPid;
    else delete this.status.qemuPid;
    await writeStatus(this.layout, this.kind, this.name, this.status);
  }

  /** Keeps an error for inspect (written with the next status) and logs it. */
  recordError(code: string, message: string, hint?: string): void {
    const entry: RecordedError = { code, message, at: new Date().toISOString() };
    if (hint) entry.hint = hint;
    this.errors.push(entry);
    this.log.warn(`${code}: ${message}`);
  }

  /** The entry as inspect shows it. */
  view(): Promise<EntryView> {
    return inspectEntry(this.layout, this.kind, this.name);
  }

  /** The refusal of work that reaches a daemon after it decided to exit. */
  exitingError(): ControllerError {
    return new ControllerError("CONTROLLER_DAEMON_EXITING", `the controller of ${this.name} is exiting`, {
      hint: "Retry: a fresh controller takes over.",
    });
  }

  /** The running parts, or CONTROLLER_NOT_RUNNING. */
  running(): RunningParts {
    const { vm, supervisor, gateway } = this;
    if (!vm || !supervisor || !gateway) {
      throw new ControllerError("CONTROLLER_NOT_RUNNING", `${this.name} is not running`, {
        hint: `Start it with {"action":"start","name":"${this.name}"}.`,
        details: { name: this.name, state: this.status.state },
      });
    }
    return { vm, supervisor, gateway };
  }
}
