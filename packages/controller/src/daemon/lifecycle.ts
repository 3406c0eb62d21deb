// Create, prepare, start, stop, suspend and destroy of one entry, and the boot they share. Each runs alone
// in the entry's queue (instance.ts); guest operations do not wait behind them. Create and prepare
// (the new disk, the record, the roll-back of a failed create) are in create.ts.

import { messageOf, type SandboxConfig } from "@pi-sandbox/config";
import type { GuestIdentity, SupervisorClient } from "@pi-sandbox/supervisor";
import { isVmError } from "@pi-sandbox/vm";
import { ControllerError } from "../errors.js";
import type { EntryView } from "../state/inspect.js";
import type { EntryKind } from "../state/layout.js";
import { checkpointEveryOf, completePendingCreate, readRecord, readStatus, writeRecord } from "../state/records.js";
import type { ProgressEvent } from "../wire.js";
import type { ConfigSource, LifecycleActions, StartOptions } from "../actions/kit/context.js";
import { bootInstanceVm } from "./boot-vm.js";
import { createInstance, prepareTemplate, withIdleSuspend, type BootOptions, type CreateSteps } from "./create.js";
import { readAgentDoor, writeAgentDoor } from "./agent-door.js";
import { IDENTITY_PROGRESS, newGuestIdentity } from "./guest-identity.js";
import { installGuestConfig, runSetup } from "./guest-setup.js";
import { recordedPreviewAddress, releasePreviewAddress } from "./preview-address.js";
import { noteRecovery } from "./recovery.js";
import { newSecretSalt } from "./secrets.js";
import type { InstanceRuntime, RuntimeVm } from "./runtime.js";
import type { GuestOperations } from "./services.js";
import {
  dropSuspendedMemory,
  finishWarmStart,
  lastStart,
  noteRestore,
  suspendInstance,
  type SuspendTeardown,
} from "./suspend.js";
import { toControllerError, type InstanceState } from "./state.js";

type Progress = (event: ProgressEvent) => void;

/** What a teardown keeps. */
export interface TeardownOptions {
  /** Checkpoint the disk (else the run is discarded, or kept with `keepRun`). */
  checkpoint: boolean;
  /** Without a checkpoint, keep the run for the next start to recover (its QEMU died on its own). */
  keepRun?: boolean;
  /** Save the memory too (a suspend). */
  keepMemory?: boolean;
  /** Leave the previews bound (an auto-suspend). */
  keepPreviews?: boolean;
}

/** The lifecycle of one entry. */
export class Lifecycle {
  /** The guest workspace of the running VM's agent, for a reattach. */
  private workspace: string | undefined;

  constructor(
    private readonly state: InstanceState,
    readonly runtime: InstanceRuntime,
    private readonly guest: GuestOperations,
  ) {}

  /** The lifecycle operations for one call, reporting to `progress`; `queue` serialises them. */
  actions(progress: Progress, queue: <T>(work: () => Promise<T>) => Promise<T>): LifecycleActions {
    return {
      create: (source) => queue(() => this.create(source, progress)),
      prepare: (source) => queue(() => this.prepare(source, progress)),
      stop: () => queue(() => this.stop(progress)),
      start: (options) => queue(() => this.start(progress, options)),
      suspend: () => queue(() => suspendInstance(this.state, (options) => this.teardown(options), progress)),
      destroy: (confirm) => queue(() => this.destroy(confirm, progress)),
    };
  }

  private get name(): string {
    return this.state.name;
  }

  /** A new instance from a config or a template (create.ts). */
  create(source: ConfigSource & { template?: string; idleSuspendMs?: number }, progress: Progress): Promise<EntryView> {
    return createInstance(this.steps(), source, progress);
  }

  /** A template from a config (create.ts). */
  prepare(source: ConfigSource & { config: string; suspend?: boolean }, progress: Progress): Promise<EntryView> {
    return prepareTemplate(this.steps(), source, progress);
  }

  /** What create and prepare use of this lifecycle. */
  private steps(): CreateSteps {
    return {
      state: this.state,
      runtime: this.runtime,
      boot: (config, progress, options) => this.boot(config, progress, options),
      bootVm: (diskDir, config, progress, secretSalt, freshDisk) =>
        this.bootVm(diskDir, config, progress, secretSalt, freshDisk),
      startAgent: (vm, config, progress, identity) => this.startAgent(vm, config, progress, false, identity),
      teardown: (options) => this.teardown(options),
      failStart: (error) => this.failStart(error),
    };
  }

  /**
   * Reopens (or resumes) the instance; a running one is left as it is. `idleSuspendMs` (0: off)
   * replaces its `idle.suspendAfter` for good, running or not.
   */
  async start(progress: Progress, options: StartOptions = {}): Promise<EntryView> {
    let record = await readRecord(this.state.layout, "instances", this.name);
    if (record && options.idleSuspendMs !== undefined) {
      record = { ...record, config: withIdleSuspend(record.config, options.idleSuspendMs) };
      await writeRecord(this.state.layout, record);
      if (this.state.vm) this.state.suspendAfterMs = record.config.idle?.suspendAfterMs;
    }
    if (this.state.vm) return this.state.view();
    if (!record) {
      throw new ControllerError("CONTROLLER_NOT_FOUND", `no instance named ${this.name}`, {
        hint: 'Create it with {"action":"create","name":"…","config":"sandbox.yaml"}.',
        details: { name: this.name },
      });
    }
    this.state.errors = [];
    // Each daemon starts with a fresh status; the last setup's outcome stays until the next setup.
    const previous = await readStatus(this.state.layout, "instances", this.name);
    if (previous?.setup) this.state.status.setup = previous.setup;
    if (previous?.setAside) this.state.status.setAside = previous.setAside;
    try {
      let secretSalt = record.secretSalt;
      if (!secretSalt) {
        secretSalt = newSecretSalt();
        await writeRecord(this.state.layout, { ...record, secretSalt });
      }
      await this.boot(record.config, progress, {
        ...(record.pendingCreate ? { pendingCreate: record.pendingCreate, interrupted: true } : {}),
        secretSalt,
        ...(previous?.state === "suspended" ? { suspended: previous } : {}),
      });
    } catch (error) {
      await this.failStart(error);
      throw error;
    }
    return this.state.view();
  }

  private async failStart(error: unknown): Promise<void> {
    const e = toControllerError(error);
    this.state.recordError(e.code, e.message, e.hint);
    await this.teardown({ checkpoint: false }).catch(() => undefined);
    await this.state.setState("failed").catch(() => undefined);
    this.state.finish();
  }

  /** Boots the instance disk, starts the agent, finishes a pending create, runs resume and services. */
  private async boot(config: SandboxConfig, progress: Progress, options: BootOptions): Promise<void> {
    const { state } = this;
    const started = Date.now();
    state.suspendAfterMs = config.idle?.suspendAfterMs;
    state.checkpointEveryMs = checkpointEveryOf(config);
    // Of the last run (an auto-suspend keeps this daemon): the suspend that ended it took a newer one.
    delete state.status.lastCheckpoint;
    await state.setState("starting");
    const vm = await this.bootVm(
      state.layout.diskDir("instances", this.name),
      config,
      progress,
      options.secretSalt,
      options.pendingCreate?.freshDisk === true,
    );
    const pendingCreate = await noteRecovery(state, vm, options, progress);
    const warm = noteRestore(vm, progress);
    // Its services run on in the resumed memory: previews waiting for this wake may go on now.
    if (warm) state.guestResumed();
    // A new guest's identity rides the agent's hello; an agent that did not write it gets the exec.
    const newIdentity = pendingCreate?.newIdentity ? newGuestIdentity(this.name) : undefined;
    const supervisor = await this.startAgent(vm, config, progress, warm, newIdentity);
    let identity: Promise<void> | undefined;
    if (newIdentity) {
      progress({ stage: "boot", message: IDENTITY_PROGRESS });
      if (!supervisor.identityApplied) {
        state.log.info("the agent did not write the new identity at hello: an exec gives it");
        identity = this.runtime.giveOwnIdentity(supervisor, this.name);
      }
    }
    if (warm) {
      // An identity exec runs beside the previews' reopening (its services run on in the resumed
      // memory, which keeps the template's identity whatever is done); a failed one still rolls a
      // create back.
      return finishWarmStart(state, this.guest, options.suspended, progress, started, async () => {
        await identity;
        options.setupDone = true;
      });
    }
    await identity;
    const configText = pendingCreate?.configText;
    if (configText !== undefined) {
      await installGuestConfig(supervisor, configText);
      const setup = await runSetup(supervisor, config, progress);
      await state.setState("starting", {
        setup: {
          exitCode: setup.exitCode,
          timedOut: setup.timedOut,
          at: new Date().toISOString(),
          logPath: setup.logPath,
        },
      });
      if (!setup.ok) {
        state.recordError(
          "CONTROLLER_SETUP_FAILED",
          `setup failed with exit ${setup.exitCode}${setup.timedOut ? " (deadline passed)" : ""}; the instance starts anyway`,
          `Full output in the guest at ${setup.logPath}; fix and rerun the commands with exec.`,
        );
      }
    }
    options.setupDone = true;
    progress({ stage: "resume", message: "running resume hooks" });
    const resume = await supervisor.runResume({ commands: config.resume });
    const resumePid = resume.running ? resume.handle : undefined;
    if (resumePid) progress({ stage: "resume", message: `resume continues in the background (handle ${resumePid})` });
    else if (resume.exitCode !== 0) {
      state.recordError(
        "CONTROLLER_RESUME_FAILED",
        `resume hooks failed with exit ${resume.exitCode}`,
        resume.output.slice(-500),
      );
    }
    progress({ stage: "services", message: "starting services" });
    // A create has just written the guest copy from this config: it is not read back.
    await this.guest.ensureWithProgress(progress, configText !== undefined ? config : undefined);
    await state.setState("running", { ...(resumePid ? { resumePid } : {}), lastStart: lastStart(started, false) });
    progress({ stage: "done", message: `${this.name} is running` });
  }

  private bootVm(
    diskDir: string,
    config: SandboxConfig,
    progress: Progress,
    secretSalt: string,
    freshDisk: boolean,
  ): Promise<RuntimeVm> {
    return bootInstanceVm(this.state, this.runtime, diskDir, config, progress, secretSalt, freshDisk);
  }

  /** Starts or (`warm`: the resumed agent, through its door when it left one) reattaches the agent. */
  private async startAgent(
    vm: RuntimeVm,
    config: SandboxConfig,
    progress: Progress,
    warm: boolean,
    identity?: GuestIdentity,
  ): Promise<SupervisorClient> {
    const { layout, kind } = this.state;
    progress({ stage: "agent", message: "starting the guest agent" });
    this.workspace = config.workspace;
    this.state.supervisor = await this.runtime.startAgent(vm, {
      workspace: config.workspace,
      logger: this.state.log.child("[agent]"),
      door: warm ? await readAgentDoor(layout, kind, this.name) : undefined,
      identity,
    });
    // Only a later warm start needs it, and that falls back to an exec: never fail this start.
    await writeAgentDoor(layout, kind, this.name, this.state.supervisor.hello.door).catch((error: unknown) =>
      this.state.log.warn(`could not record the agent's door: ${messageOf(error)}`),
    );
    return this.state.supervisor;
  }

  /**
   * A new channel to the agent of the running VM after the last one closed: the agent outlives
   * its channel, so its services and exec handles carry on (`hello.sessions` > 0) unless the agent
   * itself is gone, when a fresh one starts (`sessions` 0).
   */
  async reattachAgent(): Promise<SupervisorClient> {
    const { vm } = this.state.running();
    this.state.supervisor = await this.runtime.startAgent(vm, {
      workspace: this.workspace ?? "/workspace",
      logger: this.state.log.child("[agent]"),
    });
    return this.state.supervisor;
  }

  async stop(progress: Progress): Promise<EntryView> {
    const { state } = this;
    if (!state.vm) {
      // Suspended by its idle clock, this daemon still holds the previews: they go now.
      await this.closePreviews();
      const written = await readStatus(state.layout, state.kind, this.name);
      if (written?.state === "suspended") await dropSuspendedMemory(state, this.runtime, progress);
      state.finish();
      return state.view();
    }
    try {
      // Best effort: on a full host disk the status cannot be written, and the stop must go on.
      await state.setState("stopping").catch((e: unknown) => state.log.warn(`writing status: ${String(e)}`));
      progress({ stage: "stop", message: "closing previews and stopping services" });
      const result = await this.teardown({ checkpoint: true });
      progress({
        stage: "checkpoint",
        message: `checkpoint written in ${((result?.totalMs ?? 0) / 1000).toFixed(1)} s`,
      });
      await state.setState("stopped", { previews: [] });
    } catch (error) {
      const e = toControllerError(error);
      state.recordError(e.code, e.message, e.hint ?? "The previous checkpoint is kept; start reopens it.");
      await state.setState("failed").catch(() => undefined);
      throw e;
    } finally {
      state.finish();
    }
    return state.view();
  }

  /**
   * Cuts previews and the agent, then checkpoints (or discards) the VM run. With `keepMemory` (a
   * suspend) the agent is only detached, its services running on in the saved memory. With
   * `keepPreviews` (an auto-suspend) the previews stay bound, to wake the instance.
   */
  async teardown(options: TeardownOptions): Promise<SuspendTeardown | undefined> {
    const { state } = this;
    const { supervisor, vm } = state;
    state.supervisor = undefined;
    state.vm = undefined;
    // Requests held for the user's answer go with the run: nobody is asked about them any more.
    state.egress.close();
    if (!options.keepPreviews) await this.closePreviews();
    if (supervisor && options.keepMemory) {
      await supervisor.detach().catch((e: unknown) => state.log.warn(`detaching the agent: ${String(e)}`));
    } else if (supervisor) {
      await supervisor.stopServices().catch((e: unknown) => state.log.warn(`stopping services: ${String(e)}`));
      await supervisor.close().catch(() => undefined);
    }
    if (!vm) return undefined;
    if (!options.checkpoint) {
      await vm.close(options.keepRun ? { keepRun: true } : {});
      return undefined;
    }
    const result = options.keepMemory ? await vm.suspend() : await vm.stop();
    // The checkpoint holds the first boot's work now: a later start need not redo the create.
    if (state.kind === "instances") await completePendingCreate(state.layout, this.name);
    return result;
  }

  /** Closes the previews (after an auto-suspend, the daemon held them with no VM running). */
  async closePreviews(): Promise<void> {
    const { gateway } = this.state;
    this.state.gateway = undefined;
    await gateway?.closeAll().catch((e: unknown) => this.state.log.warn(`closing previews: ${String(e)}`));
  }

  /**
   * The auto-suspend: a suspend that keeps the previews bound and the daemon running, so the next
   * preview request or action resumes the instance (see auto-suspend.ts).
   */
  async autoSuspend(): Promise<void> {
    await suspendInstance(
      this.state,
      (options) => this.teardown(options),
      (event) => this.state.log.info(`[${event.stage}] ${event.message}`),
      {
        idle: true,
      },
    );
  }

  async destroy(confirm: string, progress: Progress): Promise<{ destroyed: string; kind: EntryKind }> {
    const { state } = this;
    if (confirm !== this.name) {
      throw new ControllerError(
        "CONTROLLER_CONFIRM_MISMATCH",
        `destroy needs confirm equal to the name "${this.name}"`,
        {
          hint: `Run {"action":"destroy","name":"${this.name}","confirm":"${this.name}"}; this removes the disk for good.`,
          details: { name: this.name, confirm },
        },
      );
    }
    if (!(await readRecord(state.layout, state.kind, this.name))) {
      state.finish();
      throw new ControllerError(
        "CONTROLLER_NOT_FOUND",
        `no ${state.kind === "templates" ? "template" : "instance"} named ${this.name}`,
        { details: { name: this.name } },
      );
    }
    progress({ stage: "destroy", message: `destroying ${this.name}` });
    await this.teardown({ checkpoint: false });
    await this.runtime.disks.destroy(state.layout.diskDir(state.kind, this.name)).catch((error: unknown) => {
      if (!(isVmError(error) && error.code === "VM_DISK_NOT_FOUND")) throw error;
    });
    const address = state.kind === "instances" ? await recordedPreviewAddress(state.layout, this.name) : undefined;
    await state.removeEntry();
    if (state.kind === "instances") await releasePreviewAddress(state.layout, this.name, address);
    state.finish();
    return { destroyed: this.name, kind: state.kind };
  }
}
