// One entry's controller inside its daemon: runs actions, lifecycle work one at a time in a queue,
// guest actions beside it.
import PQueue from "p-queue";
import { processUsage } from "@pi-sandbox/vm/host";
import type { DaemonContext } from "../actions/kit/define.js";
import type { HostGuard } from "../host-guard.js";
import { findAction } from "../actions/kit/registry.js";
import { ControllerError, isControllerError } from "../errors.js";
import type { EntryKind, StateLayout } from "../state/layout.js";
import type { LedgerKind } from "../state/ledger.js";
import type { EntryState } from "../state/records.js";
import type { Caller, IdleReading, ProgressEvent } from "../wire.js";
import { AgentReattach } from "./agent-reattach.js";
import { AutoCheckpoint } from "./auto-checkpoint.js";
import { AutoSuspend } from "./auto-suspend.js";
import { Branches } from "./branches.js";
import { PreviewTally } from "./preview-tally.js";
import { EntryDirWatch, reportEntryDirGone } from "./entry-dir-watch.js";
import { Lifecycle } from "./lifecycle.js";
import { adoptParked, parkInstance } from "./parking.js";
import type { DaemonLogger } from "../log.js";
import { createVmRuntime, type InstanceRuntime } from "./runtime.js";
import { GuestOperations } from "./services.js";
import { InstanceState, toControllerError } from "./state.js";
import { suspendInstance } from "./suspend.js";

export { toControllerError };

/** Context of one action call. */
export interface CallContext {
  /** Streams progress to the caller (who may have gone; events are then dropped). */
  progress: (event: ProgressEvent) => void;
  /** Aborted when the caller's connection closes. */
  signal?: AbortSignal;
  /** The host-path limits of a model's call. */
  guard?: HostGuard;
  /** Who makes the call (default `library`). */
  caller?: Caller;
}

/** Whether an action needs the guest (an instance that suspended itself is resumed first). */
function needsGuest(args: Record<string, unknown> & { action: string }, spec: { hostOnly?: boolean }): boolean {
  // The controller log is on the host.
  return !spec.hostOnly && !(args.action === "logs" && args.service === undefined);
}

/**
 * Owns one instance (or, for prepare, one template) inside its daemon: the VM, the supervisor
 * channel and the preview gateway, all reached through an {@link InstanceRuntime}. Lifecycle
 * operations run one at a time through a queue; reads, exec waits and file operations do not wait
 * behind them.
 */
export class InstanceController {
  readonly #state: InstanceState;
  readonly #lifecycle: Lifecycle;
  readonly #branches: Branches;
  readonly #guest: GuestOperations;
  readonly #queue = new PQueue({ concurrency: 1 });
  readonly #idle: AutoSuspend;
  readonly #checkpoints: AutoCheckpoint;
  readonly #previewTally = new PreviewTally(Date.now());
  #recordedFault: unknown;
  readonly #reattach: AgentReattach;
  readonly #entryDir: EntryDirWatch;

  /** `now` (ms) drives the idle and checkpoint clocks (a test seam; default `Date.now`). */
  constructor(
    layout: StateLayout,
    kind: EntryKind,
    name: string,
    log: DaemonLogger,
    runtime?: InstanceRuntime,
    options: { now?: () => number } = {},
  ) {
    this.#state = new InstanceState(layout, kind, name, log);
    this.#entryDir = new EntryDirWatch(layout.entryDir(kind, name));
    this.#guest = new GuestOperations(this.#state);
    this.#lifecycle = new Lifecycle(
      this.#state,
      runtime ?? createVmRuntime({ stateRoot: layout.runtimeDir(), agentSeeds: layout.agentSeedsDir() }),
      this.#guest,
    );
    this.#branches = new Branches(this.#state, this.#lifecycle, this.#lifecycle.runtime);
    this.#reattach = new AgentReattach(this.#state, this.#lifecycle);
    const state = this.#state;
    const cpuMs = () => {
      const pid = state.vm?.hostPid;
      return pid === undefined ? undefined : processUsage(pid)?.cpuMs;
    };
    this.#idle = new AutoSuspend(
      {
        suspendAfterMs: () => (state.kind === "instances" ? state.suspendAfterMs : undefined),
        running: () => state.vm !== undefined && state.status.state === "running" && !state.exiting,
        // An automatic checkpoint in the queue is not lifecycle work: counted as use, the checkpoints
        // of a guest that only writes its disk would keep it from ever suspending.
        busy: () => this.#queue.size + this.#queue.pending - (this.#checkpoints.pending ? 1 : 0) > 0,
        enqueue: (work) => this.#enqueue(work),
        suspend: () => this.#lifecycle.autoSuspend(),
        start: async () => {
          await this.#lifecycle.start((event) => state.log.info(`[${event.stage}] ${event.message}`));
        },
        log: state.log,
      },
      {
        previews: () => state.gateway?.activity(),
        terminals: () => this.#guest.terminalSessions(),
        cpuMs,
        jobs: () => state.supervisor?.activity() ?? Promise.resolve(undefined),
      },
      options.now,
    );
    this.#checkpoints = new AutoCheckpoint(
      {
        everyMs: () => (state.kind === "instances" ? state.checkpointEveryMs : undefined),
        running: () =>
          state.vm !== undefined && state.status.state === "running" && !state.exiting && !this.#idle.asleep,
        busy: () => this.busy,
        enqueue: (work) => this.#enqueue(work),
        checkpoint: () => state.running().vm.checkpoint(),
        checkpointed: (outcome, at) =>
          state.setState(state.status.state, {
            lastCheckpoint: { at, generation: outcome.generation, stallMs: outcome.stallMs },
          }),
        failed: async (error) => {
          const e = toControllerError(error);
          state.recordError(
            e.code,
            `an automatic checkpoint failed: ${e.message}`,
            e.hint ?? "The previous checkpoint is kept; the next one is tried after more use.",
          );
          await state.setState(state.status.state);
        },
        log: state.log,
      },
      {
        previews: () => state.gateway?.activity(),
        terminals: () => this.#guest.terminalSessions(),
        cpuMs,
        diskWrittenAtMs: () => state.vm?.diskWrittenAtMs,
      },
      options.now,
    );
    state.wake = () => this.#idle.wake({ early: true });
    state.guestResumed = () => this.#idle.guestResumed();
  }

  /** Resolves when the daemon should exit (after stop, destroy or prepare). */
  get finished(): Promise<void> {
    return this.#state.finished;
  }

  /** Whether a VM runs now. */
  get running(): boolean {
    return this.#state.vm !== undefined;
  }

  /** Current lifecycle state for pings. */
  get state(): EntryState {
    return this.#state.status.state;
  }

  /** Whether lifecycle work is queued or running. */
  get busy(): boolean {
    return this.#queue.size + this.#queue.pending > 0;
  }

  /** True once the daemon has decided to exit: new calls go to a fresh daemon. */
  get exiting(): boolean {
    return this.#state.exiting;
  }

  /** True while the instance is suspended by its idle clock: this daemon holds its previews to wake it. */
  get asleep(): boolean {
    return this.#idle.asleep && !this.#state.exiting;
  }

  /** Appends to the instance's ledger (see InstanceState.record). */
  readonly record = (kind: LedgerKind, data: Record<string, unknown>): void => this.#state.record(kind, data);

  /** The idle clock, for pings (undefined while off or not running). */
  get idle(): IdleReading | undefined {
    return this.#idle.reading();
  }

  /** At the daemon's start: takes a parked instance's previews back from the waker, asleep (parking.ts). */
  adopt(): Promise<void> {
    return adoptParked(this.#state, this.#lifecycle.runtime, () => this.#idle.parked());
  }

  /** Asleep and unused: hands the previews to the waker and ends the daemon (parking.ts); undefined: not now. */
  park(): Promise<boolean | undefined> {
    const state = this.#state;
    return this.#enqueue(async () => {
      const unused = (state.gateway?.activity().open ?? 0) === 0 && this.#guest.terminalSessions() === 0;
      if (!this.asleep || state.vm || !unused) return undefined;
      if (!(await parkInstance(state, this.#lifecycle.runtime))) return false;
      state.finish();
      return true;
    }).catch(() => undefined);
  }

  /**
   * Called every second by the daemon: one look at what uses the instance; suspends it when unused
   * long enough (`idle.suspendAfter`), checkpoints its disk after enough use (`checkpoint.every`).
   */
  checkIdle(): void {
    const previews = this.#previewTally.look(Date.now(), this.#state.gateway?.activity());
    if (previews) this.#state.record("preview", previews);
    void this.#idle.tick().catch((error: unknown) => this.#state.log.warn(`idle check: ${String(error)}`));
    void this.#checkpoints.tick().catch((error: unknown) => this.#state.log.warn(`checkpoint check: ${String(error)}`));
  }

  /** Runs one validated action through its module's handler. */
  async call(args: Record<string, unknown> & { action: string }, ctx: CallContext): Promise<unknown> {
    if (this.#state.exiting) throw this.#state.exitingError();
    const spec = findAction(args.action);
    if (!spec || spec.route === "local") {
      throw new ControllerError("CONTROLLER_UNKNOWN_ACTION", `the daemon does not handle ${args.action}`);
    }
    const context: DaemonContext = {
      name: this.#state.name,
      kind: this.#state.kind,
      progress: ctx.progress,
      signal: ctx.signal,
      guard: ctx.guard,
      stateRoot: this.#state.layout.root,
      lifecycle: this.#lifecycle.actions(ctx.progress, (work) => this.#enqueue(work)),
      branches: this.#branches.actions(ctx.progress, (work) => this.#enqueue(work)),
      guest: this.#guest,
      egress: this.#state.egress,
      caller: ctx.guard ? "model" : (ctx.caller ?? "library"),
    };
    // Counted before any wake it asks for: an auto-suspend deciding now sees it and stands down.
    const ended = this.#idle.callStarted();
    const endedForCheckpoints = this.#checkpoints.callStarted();
    try {
      if (spec.lifecycle) {
        const result = await spec.run(args, context);
        if (spec.lifecycle === "start") this.#idle.started();
        return result;
      }
      if (needsGuest(args, spec)) await this.#wake(args.action, ctx.progress);
      return await this.#duringLife(args.action, () => spec.run(args, context));
    } finally {
      ended();
      endedForCheckpoints();
    }
  }

  /** Resumes an instance that suspended itself before an action that needs its guest. */
  async #wake(action: string, progress: (event: ProgressEvent) => void): Promise<void> {
    const waking = this.#idle.wake();
    if (!waking) return;
    progress({ stage: "boot", message: `resuming ${this.#state.name} (suspended while unused) for ${action}` });
    await waking;
  }

  /**
   * Runs lifecycle work one at a time. Work queued behind a stop or destroy finds the daemon
   * exiting and is refused, so the client hands it to a fresh daemon instead of this one booting
   * a VM it is about to abandon.
   */
  #enqueue<T>(work: () => Promise<T>): Promise<T> {
    return this.#queue.add(() => {
      if (this.#state.exiting) throw this.#state.exitingError();
      return work();
    });
  }

  /**
   * A guest action that a concurrent stop or destroy cuts off (the agent channel closes under it)
   * is reported as the instance no longer running, not as an agent failure.
   */
  async #duringLife<T>(action: string, work: () => Promise<T>): Promise<T> {
    const { supervisor, vm } = this.#state;
    try {
      return await work();
    } catch (error) {
      // The VM cannot answer (QEMU paused it on a full host disk): its own error says why and
      // what to do, not the agent channel it took down.
      if (vm?.fault && !isControllerError(error)) throw toControllerError(vm.fault);
      if (supervisor && this.#state.supervisor !== supervisor && !isControllerError(error)) {
        const name = this.#state.name;
        if (this.#state.vm === vm && vm) {
          throw new ControllerError(
            "CONTROLLER_AGENT_REATTACHED",
            `the guest agent's channel closed while ${action} was in flight; a new one is open`,
            { hint: "Retry.", details: { name, action }, cause: error },
          );
        }
        throw new ControllerError("CONTROLLER_NOT_RUNNING", `${name} stopped while ${action} was in flight`, {
          hint: `Start it with {"action":"start","name":"${name}"} and retry.`,
          details: { name, action },
          cause: error,
        });
      }
      throw error;
    }
  }

  /**
   * Called every second by the daemon: when the entry's directory was removed under it (see
   * entry-dir-watch.ts), it says so, closes the VM (no disk is left to checkpoint to) and exits.
   */
  async checkStateDir(now = Date.now()): Promise<void> {
    const state = this.#state;
    // A destroy (or a create's roll-back) removes it on purpose, in the queue.
    if (state.exiting || this.busy || !(await this.#entryDir.gone(now)) || state.exiting || this.busy) return;
    await reportEntryDirGone(state);
    await this.#enqueue(async () => {
      await this.#lifecycle.teardown({ checkpoint: false }).catch(() => undefined);
      state.finish();
    }).catch(() => undefined);
  }

  /**
   * Called every second by the daemon: a VM whose QEMU exited by itself (crash, OOM kill, someone
   * killed it) must not keep reading "running". The run is kept for the next start, which recovers
   * what the disk held (crash-consistent, like a power cut); the status says failed with the
   * reason, and the daemon exits.
   */
  checkVm(): void {
    const state = this.#state;
    const vm = state.vm;
    const fault = vm?.fault;
    if (fault && this.#recordedFault !== fault) {
      // Recorded once; written when the host lets us (it may be the very disk that is full).
      this.#recordedFault = fault;
      state.recordError(fault.code, fault.message);
      void state.setState(state.status.state).catch(() => undefined);
    }
    const lost = state.supervisor?.closedReason;
    // A VM with a fault (QEMU paused it on a full host disk) cannot answer: its channel going is a
    // consequence, and the fault already says what to do (free space, then stop).
    if (vm && !vm.closed && lost && !fault && !this.busy && !state.exiting) {
      void this.#enqueue(() => this.#agentLost(lost)).catch(() => undefined);
      return;
    }
    if (!vm || !vm.closed || this.busy || state.exiting) return;
    void this.#enqueue(async () => {
      if (state.vm !== vm) return;
      state.recordError(
        "CONTROLLER_VM_EXITED",
        `the VM of ${state.name} exited unexpectedly; what the guest had not synced to its disk is lost`,
        `Start it again with {"action":"start","name":"${state.name}"}; it reopens the disk as the VM left it.`,
      );
      await this.#lifecycle.teardown({ checkpoint: false, keepRun: true }).catch(() => undefined);
      await state.setState("failed", { previews: [] }).catch(() => undefined);
      state.finish();
    }).catch(() => undefined);
  }

  /**
   * The agent's channel closed under a running VM. A channel that just closed (AGENT_CLOSED: its
   * bridge or door stream ended, or the agent exited) is reattached, a few times at most (see
   * agent-reattach.ts). One the host cut for breaking the protocol (a hostile or broken guest), or
   * one that keeps closing: the disk is checkpointed (the guest's own work is kept), the status
   * reads failed with the reason, and the daemon exits; start boots a fresh agent.
   */
  async #agentLost(reason: { code: string; message: string }): Promise<void> {
    const state = this.#state;
    if (!state.supervisor?.closedReason) return;
    if (reason.code === "AGENT_CLOSED" && (await this.#reattach.attempt(reason))) return;
    state.recordError(
      reason.code,
      `the guest agent of ${state.name} is gone: ${reason.message}`,
      `Its services stopped. The disk was checkpointed; run {"action":"start","name":"${state.name}"} to start a fresh agent.`,
    );
    // A stop that cannot checkpoint still ends the VM and keeps the previous checkpoint.
    await this.#lifecycle
      .teardown({ checkpoint: true })
      .catch((error: unknown) => state.log.warn(`checkpoint after the agent was lost: ${String(error)}`));
    await state.setState("failed", { previews: [] }).catch(() => undefined);
    state.finish();
  }

  /**
   * SIGTERM: stop cleanly (checkpoint) if a VM runs. An instance that suspended itself stays
   * suspended (its saved memory is kept; a stop would drop it): only its previews go.
   */
  async shutdown(): Promise<void> {
    // Queued behind any lifecycle work in progress (a boot finishes, then is checkpointed), so a
    // signal never leaves a half-started VM behind.
    await this.#queue
      .add(() =>
        this.#state.vm || !this.#idle.asleep
          ? this.#lifecycle.stop(() => undefined)
          : suspendInstance(
              this.#state,
              (options) => this.#lifecycle.teardown(options),
              () => undefined,
            ),
      )
      .catch(() => undefined);
    this.#state.finish();
  }
}
