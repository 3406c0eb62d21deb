import { copyFile, mkdir, readFile, rm } from "node:fs/promises";
import { dirname, posix } from "node:path";
import PQueue from "p-queue";
import { hasPreview, parseConfig, readConfigText, type SandboxConfig, type ServiceConfig } from "@pi-sandbox/config";
import {
  JsonFilePortLeaseStore,
  PreviewGateway,
  adHocPreview,
  guestVmConnector,
  type PreviewInfo,
  type PreviewLink,
  type PreviewSpec,
} from "@pi-sandbox/ingress";
import { SupervisorClient, isSupervisorError, type ExecResult, type ServicesResult } from "@pi-sandbox/supervisor";
import { DiskStore, isVmError, startVm, type RunningVm } from "@pi-sandbox/vm";
import { ControllerError, isControllerError } from "../errors.js";
import type { EntryKind, StateLayout } from "../state/layout.js";
import { inspectEntry, type EntryView } from "../state/inspect.js";
import {
  readRecord,
  readStatus,
  writeRecord,
  writeStatus,
  type EntryRecord,
  type EntryState,
  type EntryStatus,
  type PreviewLinkInfo,
  type RecordedError,
} from "../state/records.js";
import type { ProgressEvent } from "../wire.js";
import type { DaemonLogger } from "./log.js";

/** Progress sink of one request. */
export type Progress = (event: ProgressEvent) => void;

/** Context of one action call. */
export interface CallContext {
  /** Streams progress to the caller (who may have gone; events are then dropped). */
  progress: Progress;
}

/** Converts lower-layer errors into the controller's wire form, keeping code and hint. */
export function toControllerError(error: unknown): ControllerError {
  if (isControllerError(error)) return error;
  const e = error as { code?: unknown; message?: unknown; hint?: unknown; details?: unknown };
  if (e && typeof e.code === "string" && typeof e.message === "string") {
    return new ControllerError(e.code, e.message, {
      hint: typeof e.hint === "string" ? e.hint : undefined,
      details: typeof e.details === "object" && e.details ? (e.details as Record<string, unknown>) : undefined,
      cause: error,
    });
  }
  return new ControllerError("CONTROLLER_INTERNAL", String((error as Error)?.message ?? error), { cause: error });
}

/** Reads a host sandbox.yaml once: the validated config, and its text for the guest's own copy (comments kept). */
async function readConfigFile(path: string): Promise<{ config: SandboxConfig; text: string }> {
  const { text, sourcePath } = await readConfigText(path);
  return { config: parseConfig(text, { sourcePath }), text };
}

function linksOf(service: ServiceConfig): PreviewLink[] {
  const links: PreviewLink[] = [];
  if (service.preview) links.push({ ...service.preview });
  for (const entry of service.previews) {
    if (entry.kind === "link") {
      const { kind: _kind, ...link } = entry;
      links.push(link);
    } else for (const link of entry.links) links.push({ ...link, folder: entry.folder });
  }
  return links;
}

function previewInfoToLinks(info: PreviewInfo): PreviewLinkInfo[] {
  return info.links.map((l) => {
    const out: PreviewLinkInfo = { service: info.key, url: l.url, title: l.title };
    if (l.description !== undefined) out.description = l.description;
    if (l.folder !== undefined) out.folder = l.folder;
    return out;
  });
}

/** The exec result as SPEC §7 names it: the opaque handle is `pid`. */
function execView(result: ExecResult): Omit<ExecResult, "handle"> & { pid: string } {
  const { handle, ...rest } = result;
  return { pid: handle, ...rest };
}

/**
 * Owns one instance (or, for prepare, one template) inside its daemon: the VM, the supervisor
 * channel and the preview gateway. Lifecycle operations run one at a time through a queue;
 * reads, exec waits and file operations do not wait behind them.
 */
export class InstanceController {
  readonly #layout: StateLayout;
  readonly #kind: EntryKind;
  readonly #name: string;
  readonly #log: DaemonLogger;
  readonly #disks: DiskStore;
  readonly #lifecycle = new PQueue({ concurrency: 1 });
  #vm: RunningVm | undefined;
  #supervisor: SupervisorClient | undefined;
  #gateway: PreviewGateway | undefined;
  #status: EntryStatus = { state: "stopped", updatedAt: new Date().toISOString() };
  #errors: RecordedError[] = [];
  #recordedFault: unknown;
  #exiting = false;
  /** Resolves when the daemon should exit (after stop, destroy or prepare). */
  readonly finished: Promise<void>;
  #finish!: () => void;

  constructor(layout: StateLayout, kind: EntryKind, name: string, log: DaemonLogger) {
    this.#layout = layout;
    this.#kind = kind;
    this.#name = name;
    this.#log = log;
    this.#disks = new DiskStore({ stateRoot: layout.runtimeDir() });
    this.finished = new Promise((resolve) => {
      this.#finish = () => {
        this.#exiting = true;
        resolve();
      };
    });
  }

  /** Whether a VM runs now. */
  get running(): boolean {
    return this.#vm !== undefined;
  }

  /** Current lifecycle state for pings. */
  get state(): EntryState {
    return this.#status.state;
  }

  /** Whether lifecycle work is queued or running. */
  get busy(): boolean {
    return this.#lifecycle.size + this.#lifecycle.pending > 0;
  }

  /** True once the daemon has decided to exit: new calls go to a fresh daemon. */
  get exiting(): boolean {
    return this.#exiting;
  }

  /** Runs one validated action. */
  async call(args: Record<string, unknown> & { action: string }, ctx: CallContext): Promise<unknown> {
    if (this.#exiting) {
      throw this.#exitingError();
    }
    switch (args.action) {
      case "create":
        return this.#queue(() => this.#create(args, ctx));
      case "prepare":
        return this.#queue(() => this.#prepare(args, ctx));
      case "start":
        return this.#queue(() => this.#start(ctx));
      case "stop":
        return this.#queue(() => this.#stop(ctx));
      case "destroy":
        return this.#queue(() => this.#destroy(args, ctx));
      default:
        return this.#guestActionDuringLife(args);
    }
  }

  /**
   * Runs lifecycle work one at a time. Work queued behind a stop or destroy finds the daemon
   * exiting and is refused, so the client hands it to a fresh daemon instead of this one booting
   * a VM it is about to abandon.
   */
  #exitingError(): ControllerError {
    return new ControllerError("CONTROLLER_DAEMON_EXITING", `the controller of ${this.#name} is exiting`, {
      hint: "Retry: a fresh controller takes over.",
    });
  }

  #queue<T>(work: () => Promise<T>): Promise<T> {
    return this.#lifecycle.add(() => {
      if (this.#exiting) {
        throw this.#exitingError();
      }
      return work();
    });
  }

  // ---- status ---------------------------------------------------------------------------

  async #setState(state: EntryState, patch: Partial<EntryStatus> = {}): Promise<void> {
    this.#status = {
      ...this.#status,
      ...patch,
      state,
      updatedAt: new Date().toISOString(),
      daemonPid: process.pid,
      errors: this.#errors,
    };
    if (this.#vm?.hostPid) this.#status.qemuPid = this.#vm.hostPid;
    else delete this.#status.qemuPid;
    await writeStatus(this.#layout, this.#kind, this.#name, this.#status);
  }

  #recordError(code: string, message: string, hint?: string): void {
    const entry: RecordedError = { code, message, at: new Date().toISOString() };
    if (hint) entry.hint = hint;
    this.#errors.push(entry);
    this.#log.warn(`${code}: ${message}`);
  }

  async #view(): Promise<EntryView> {
    return inspectEntry(this.#layout, this.#kind, this.#name);
  }

  // ---- lifecycle ------------------------------------------------------------------------

  async #create(args: Record<string, unknown>, ctx: CallContext): Promise<EntryView> {
    const existing = await readRecord(this.#layout, "instances", this.#name);
    if (existing) {
      throw new ControllerError(
        "CONTROLLER_ALREADY_EXISTS",
        existing.pendingCreate
          ? `an instance named ${this.#name} already exists; its create was interrupted before its first boot finished`
          : `an instance named ${this.#name} already exists`,
        {
          hint: existing.pendingCreate
            ? `Finish it with {"action":"start","name":"${this.#name}"} (start runs the rest of the create, setup included), or destroy it first.`
            : `Start it with {"action":"start","name":"${this.#name}"}, or destroy it first.`,
          details: { name: this.#name },
        },
      );
    }
    const diskDir = this.#layout.diskDir("instances", this.#name);
    await rm(diskDir, { recursive: true, force: true });
    let config: SandboxConfig;
    let configText: string | undefined;
    const record: Omit<EntryRecord, "config"> = {
      kind: "instances",
      name: this.#name,
      createdAt: new Date().toISOString(),
    };
    if (typeof args.config === "string") {
      ({ config, text: configText } = await readConfigFile(args.config));
      record.configPath = args.config;
      ctx.progress({ stage: "disk", message: `creating a ${config.diskGiB} GiB disk` });
      await this.#disks.createDisk(diskDir, { image: config.image, diskGiB: config.diskGiB });
    } else {
      const template = args.template as string;
      const templateRecord = await readRecord(this.#layout, "templates", template);
      const templateStatus = await readStatus(this.#layout, "templates", template);
      if (!templateRecord || templateStatus?.state !== "prepared") {
        throw new ControllerError("CONTROLLER_NOT_FOUND", `no prepared template named ${template}`, {
          hint: 'List templates with {"action":"list","kind":"templates"}; make one with prepare.',
          details: { template },
        });
      }
      config = templateRecord.config;
      record.template = template;
      ctx.progress({ stage: "disk", message: `creating a copy-on-write disk from template ${template}` });
      await this.#disks.createFromTemplate(this.#layout.diskDir("templates", template), diskDir);
    }
    // Until the first boot has written the guest config and run setup, the record says so: a
    // daemon that dies before then leaves an instance whose next start finishes the create.
    await writeRecord(this.#layout, {
      ...record,
      config,
      pendingCreate: configText !== undefined ? { configText } : {},
    });
    try {
      await this.#boot(config, ctx, { pendingCreate: configText !== undefined ? { configText } : {} });
    } catch (error) {
      // A create that failed before its first boot finished leaves nothing behind, so running it
      // again just works; the controller log is kept outside the removed entry.
      if ((await readRecord(this.#layout, "instances", this.#name))?.pendingCreate)
        throw await this.#rollBackCreate(error);
      await this.#failStart(error);
      throw error;
    }
    return this.#view();
  }

  /** Removes a half-made instance; returns the error to report, with the kept log's place and tail. */
  async #rollBackCreate(error: unknown): Promise<ControllerError> {
    const e = toControllerError(error);
    this.#log.warn(`create failed, removing ${this.#name}: ${e.code}: ${e.message}`);
    await this.#teardown({ checkpoint: false }).catch(() => undefined);
    await this.#disks.destroy(this.#layout.diskDir("instances", this.#name)).catch(() => undefined);
    const logFile = this.#layout.failedCreateLogFile(this.#name);
    let logTail = "";
    try {
      await mkdir(dirname(logFile), { recursive: true, mode: 0o700 });
      await copyFile(this.#layout.logFile("instances", this.#name), logFile);
      logTail = (await readFile(logFile, "utf8")).split("\n").slice(-21).join("\n").trim();
    } catch (copyError) {
      this.#log.warn(`keeping the log of the failed create: ${String(copyError)}`);
    }
    await rm(this.#layout.entryDir("instances", this.#name), { recursive: true, force: true }).catch(() => undefined);
    this.#finish();
    return new ControllerError(e.code, e.message, {
      hint: `${e.hint ? `${e.hint} ` : ""}Nothing of ${this.#name} was kept: fix the cause and run create again. The controller log is at ${logFile}.`,
      details: { ...e.details, logFile, logTail },
      cause: error,
    });
  }

  async #prepare(args: Record<string, unknown>, ctx: CallContext): Promise<EntryView> {
    if (await readRecord(this.#layout, "templates", this.#name)) {
      throw new ControllerError("CONTROLLER_ALREADY_EXISTS", `a template named ${this.#name} already exists`, {
        hint: `Destroy it first with {"action":"destroy","name":"${this.#name}","confirm":"${this.#name}","kind":"templates"}.`,
        details: { name: this.#name },
      });
    }
    const { config, text: configText } = await readConfigFile(args.config as string);
    const workDir = this.#layout.diskDir("templates", this.#name) + ".work";
    const templateDir = this.#layout.diskDir("templates", this.#name);
    await rm(workDir, { recursive: true, force: true });
    await rm(templateDir, { recursive: true, force: true });
    ctx.progress({ stage: "disk", message: `creating a ${config.diskGiB} GiB disk` });
    await this.#disks.createDisk(workDir, { image: config.image, diskGiB: config.diskGiB });
    try {
      await this.#setState("starting");
      const vm = await this.#bootVm(workDir, config, ctx);
      const supervisor = await this.#startSupervisor(vm, config, ctx);
      await this.#installGuestConfig(supervisor, config, configText);
      const setup = await this.#runSetup(supervisor, config, ctx);
      if (!setup.ok) {
        throw new ControllerError(
          "CONTROLLER_SETUP_FAILED",
          `setup failed (exit ${setup.exitCode}${setup.timedOut ? ", deadline passed" : ""}); no template was published`,
          {
            hint: "Fix the setup commands and run prepare again; the output is in details.output.",
            details: { exitCode: setup.exitCode, timedOut: setup.timedOut, output: setup.output.slice(-4000) },
          },
        );
      }
      ctx.progress({ stage: "checkpoint", message: "saving the prepared disk" });
      await this.#teardown({ checkpoint: true });
      await this.#disks.createTemplate(workDir, templateDir);
      await this.#disks.destroy(workDir);
      await writeRecord(this.#layout, {
        kind: "templates",
        name: this.#name,
        createdAt: new Date().toISOString(),
        configPath: args.config as string,
        config,
      });
      await this.#setState("prepared", { setup: { exitCode: setup.exitCode, at: new Date().toISOString() } });
      ctx.progress({ stage: "done", message: `template ${this.#name} is ready` });
      return await this.#view();
    } catch (error) {
      await this.#teardown({ checkpoint: false }).catch(() => undefined);
      await this.#disks.destroy(workDir).catch(() => undefined);
      await rm(this.#layout.entryDir("templates", this.#name), { recursive: true, force: true }).catch(() => undefined);
      throw error;
    } finally {
      this.#finish();
    }
  }

  async #start(ctx: CallContext): Promise<EntryView> {
    if (this.#vm) return this.#view();
    const record = await readRecord(this.#layout, "instances", this.#name);
    if (!record) {
      throw new ControllerError("CONTROLLER_NOT_FOUND", `no instance named ${this.#name}`, {
        hint: 'Create it with {"action":"create","name":"…","config":"sandbox.yaml"}.',
        details: { name: this.#name },
      });
    }
    this.#errors = [];
    if (record.pendingCreate) {
      ctx.progress({ stage: "boot", message: `finishing the interrupted create of ${this.#name}` });
    }
    try {
      await this.#boot(record.config, ctx, record.pendingCreate ? { pendingCreate: record.pendingCreate } : {});
    } catch (error) {
      await this.#failStart(error);
      throw error;
    }
    return this.#view();
  }

  async #failStart(error: unknown): Promise<void> {
    const e = toControllerError(error);
    this.#recordError(e.code, e.message, e.hint);
    await this.#teardown({ checkpoint: false }).catch(() => undefined);
    await this.#setState("failed").catch(() => undefined);
    this.#finish();
  }

  async #boot(
    config: SandboxConfig,
    ctx: CallContext,
    options: { pendingCreate?: NonNullable<EntryRecord["pendingCreate"]> },
  ): Promise<void> {
    await this.#setState("starting");
    const vm = await this.#bootVm(this.#layout.diskDir("instances", this.#name), config, ctx);
    const supervisor = await this.#startSupervisor(vm, config, ctx);
    const configText = options.pendingCreate?.configText;
    if (configText !== undefined) {
      await this.#installGuestConfig(supervisor, config, configText);
      const setup = await this.#runSetup(supervisor, config, ctx);
      await this.#setState("starting", {
        setup: { exitCode: setup.exitCode, timedOut: setup.timedOut, at: new Date().toISOString() },
      });
      if (!setup.ok) {
        this.#recordError(
          "CONTROLLER_SETUP_FAILED",
          `setup failed with exit ${setup.exitCode}${setup.timedOut ? " (deadline passed)" : ""}; the instance starts anyway`,
          `Full output in the guest at ${setup.logPath}; fix and rerun the commands with exec.`,
        );
      }
    }
    if (options.pendingCreate) {
      const record = await readRecord(this.#layout, "instances", this.#name);
      if (record) {
        const { pendingCreate: _done, ...created } = record;
        await writeRecord(this.#layout, created);
      }
    }
    ctx.progress({ stage: "resume", message: "running resume hooks" });
    const resume = await supervisor.runResume({ commands: config.resume });
    const resumePid = resume.running ? resume.handle : undefined;
    if (resumePid)
      ctx.progress({ stage: "resume", message: `resume continues in the background (handle ${resumePid})` });
    else if (resume.exitCode !== 0) {
      this.#recordError(
        "CONTROLLER_RESUME_FAILED",
        `resume hooks failed with exit ${resume.exitCode}`,
        resume.output.slice(-500),
      );
    }
    this.#gateway = new PreviewGateway({
      connector: guestVmConnector(vm),
      leases: new JsonFilePortLeaseStore(this.#layout.portsFile(this.#name)),
      logger: this.#log.child("[preview]"),
    });
    ctx.progress({ stage: "services", message: "starting services" });
    await this.#ensureServices(ctx);
    await this.#setState("running", resumePid ? { resumePid } : {});
    ctx.progress({ stage: "done", message: `${this.#name} is running` });
  }

  async #bootVm(diskDir: string, config: SandboxConfig, ctx: CallContext): Promise<RunningVm> {
    ctx.progress({
      stage: "boot",
      message: `booting (${config.resources.cpus} cpu, ${config.resources.memoryGiB} GiB)`,
    });
    const vm = await startVm({
      name: this.#name,
      diskDir,
      spec: { resources: config.resources, network: config.network },
      stateRoot: this.#layout.runtimeDir(),
      logger: this.#log.child("[vm]"),
      diskStore: this.#disks,
      onProgress: (message) => ctx.progress({ stage: "boot", message }),
    });
    this.#vm = vm;
    for (const warning of vm.warnings) ctx.progress({ stage: "boot", message: warning });
    ctx.progress({
      stage: "boot",
      message: `guest ready in ${(vm.bootMs / 1000).toFixed(1)} s (${vm.accelerator.accel})`,
    });
    await this.#setState("starting", {
      accelerator: vm.accelerator.accel,
      acceleratorReason: vm.accelerator.reason,
    });
    return vm;
  }

  async #startSupervisor(vm: RunningVm, config: SandboxConfig, ctx: CallContext): Promise<SupervisorClient> {
    ctx.progress({ stage: "agent", message: "starting the guest agent" });
    this.#supervisor = await SupervisorClient.start({
      vm,
      workspace: config.workspace,
      logger: this.#log.child("[agent]"),
    });
    return this.#supervisor;
  }

  async #installGuestConfig(supervisor: SupervisorClient, config: SandboxConfig, text: string): Promise<void> {
    await supervisor.exec(`mkdir -p ${JSON.stringify(config.workspace)}`, { cwd: "/", timeoutMs: 30_000 });
    await supervisor.writeFile(posix.join(config.workspace, ".sandbox.yaml"), text);
  }

  async #runSetup(supervisor: SupervisorClient, config: SandboxConfig, ctx: CallContext) {
    ctx.progress({ stage: "setup", message: `running setup (${config.setup.length} command(s), 20 min deadline)` });
    const setup = await supervisor.runSetup({ commands: config.setup });
    ctx.progress({
      stage: "setup",
      message: setup.ok
        ? `setup done in ${(setup.durationMs / 1000).toFixed(1)} s`
        : `setup failed (exit ${setup.exitCode})`,
    });
    return setup;
  }

  /** Opens previews for every previewed service, then ensures services with their origins. */
  async #ensureServices(ctx: CallContext, names?: readonly string[], restart = false): Promise<ServicesResult> {
    const supervisor = this.#requireSupervisor();
    const gateway = this.#gateway!;
    let config: SandboxConfig | undefined;
    try {
      config = await supervisor.readGuestConfig();
    } catch (error) {
      if (!isSupervisorError(error, "CONFIG_NOT_FOUND")) {
        const e = toControllerError(error);
        this.#recordError(
          e.code,
          `guest .sandbox.yaml: ${e.message}`,
          "Fix the guest file with write, then run services ensure.",
        );
        throw error;
      }
    }
    const origins: Record<string, string> = {};
    const wanted = new Map<string, PreviewSpec>();
    for (const name of config?.serviceOrder ?? []) {
      const service = config!.services[name]!;
      if (!hasPreview(service)) continue;
      const current = gateway.get(name);
      // The guest port is known once the agent allocates it; until then the preview points at a
      // placeholder port and is updated right after the services start.
      const spec: PreviewSpec = {
        key: name,
        guestPort: service.port ?? current?.guestPort ?? 1,
        links: linksOf(service),
      };
      try {
        const info = await gateway.open(spec);
        origins[name] = info.origin;
        wanted.set(name, spec);
      } catch (error) {
        const e = toControllerError(error);
        this.#recordError(e.code, e.message, e.hint);
        ctx.progress({ stage: "preview", message: `${name}: ${e.message}` });
      }
    }
    const result = restart
      ? await supervisor.restartServices(names, { previewOrigins: origins })
      : await supervisor.ensureServices({ previewOrigins: origins });
    for (const status of result.services) {
      const spec = wanted.get(status.name);
      if (spec && status.port && status.port !== spec.guestPort)
        await gateway.open({ ...spec, guestPort: status.port });
    }
    for (const failure of result.failures) {
      this.#recordError(
        failure.code,
        failure.message,
        failure.logPath ? `See {"action":"logs","name":"${this.#name}","service":"${failure.service}"}.` : undefined,
      );
      ctx.progress({ stage: "services", message: failure.message });
    }
    await this.#setState(this.#status.state, { previews: gateway.list().flatMap(previewInfoToLinks) });
    return result;
  }

  async #stop(ctx: CallContext): Promise<EntryView> {
    if (!this.#vm) {
      this.#finish();
      return this.#view();
    }
    try {
      // Best effort: on a full host disk the status cannot be written, and the stop must go on.
      await this.#setState("stopping").catch((e: unknown) => this.#log.warn(`writing status: ${String(e)}`));
      ctx.progress({ stage: "stop", message: "closing previews and stopping services" });
      const result = await this.#teardown({ checkpoint: true });
      ctx.progress({
        stage: "checkpoint",
        message: `checkpoint written in ${((result?.totalMs ?? 0) / 1000).toFixed(1)} s`,
      });
      await this.#setState("stopped", { previews: [] });
    } catch (error) {
      const e = toControllerError(error);
      this.#recordError(e.code, e.message, e.hint ?? "The previous checkpoint is kept; start reopens it.");
      await this.#setState("failed").catch(() => undefined);
      throw e;
    } finally {
      this.#finish();
    }
    return this.#view();
  }

  /** Cuts previews and the agent, then checkpoints (or discards) the VM run. */
  async #teardown(options: { checkpoint: boolean }) {
    const gateway = this.#gateway;
    const supervisor = this.#supervisor;
    const vm = this.#vm;
    this.#gateway = undefined;
    this.#supervisor = undefined;
    this.#vm = undefined;
    await gateway?.closeAll().catch((e: unknown) => this.#log.warn(`closing previews: ${String(e)}`));
    if (supervisor) {
      await supervisor.stopServices().catch((e: unknown) => this.#log.warn(`stopping services: ${String(e)}`));
      await supervisor.close().catch(() => undefined);
    }
    if (!vm) return undefined;
    if (options.checkpoint) return vm.stop();
    await vm.close();
    return undefined;
  }

  async #destroy(args: Record<string, unknown>, ctx: CallContext): Promise<unknown> {
    if (args.confirm !== this.#name) {
      throw new ControllerError(
        "CONTROLLER_CONFIRM_MISMATCH",
        `destroy needs confirm equal to the name "${this.#name}"`,
        {
          hint: `Send {"action":"destroy","name":"${this.#name}","confirm":"${this.#name}"}; this removes the disk for good.`,
          details: { name: this.#name, confirm: args.confirm },
        },
      );
    }
    if (!(await readRecord(this.#layout, this.#kind, this.#name))) {
      this.#finish();
      throw new ControllerError(
        "CONTROLLER_NOT_FOUND",
        `no ${this.#kind === "templates" ? "template" : "instance"} named ${this.#name}`,
        {
          details: { name: this.#name },
        },
      );
    }
    ctx.progress({ stage: "destroy", message: `destroying ${this.#name}` });
    await this.#teardown({ checkpoint: false });
    await this.#disks.destroy(this.#layout.diskDir(this.#kind, this.#name)).catch((error: unknown) => {
      if (!(isVmError(error) && error.code === "VM_DISK_NOT_FOUND")) throw error;
    });
    await rm(this.#layout.entryDir(this.#kind, this.#name), { recursive: true, force: true });
    this.#finish();
    return { destroyed: this.#name, kind: this.#kind };
  }

  // ---- guest actions --------------------------------------------------------------------

  #requireSupervisor(): SupervisorClient {
    if (!this.#supervisor || !this.#vm) {
      throw new ControllerError("CONTROLLER_NOT_RUNNING", `${this.#name} is not running`, {
        hint: `Start it with {"action":"start","name":"${this.#name}"}.`,
        details: { name: this.#name, state: this.#status.state },
      });
    }
    return this.#supervisor;
  }

  /**
   * A guest action that a concurrent stop or destroy cuts off (the agent channel closes under it)
   * is reported as the instance no longer running, not as an agent failure.
   */
  async #guestActionDuringLife(args: Record<string, unknown> & { action: string }): Promise<unknown> {
    const supervisor = this.#supervisor;
    const vm = this.#vm;
    try {
      return await this.#guestAction(args);
    } catch (error) {
      // The VM cannot answer (QEMU paused it on a full host disk): its own error says why and
      // what to do, not the agent channel it took down.
      if (vm?.fault && !isControllerError(error)) throw toControllerError(vm.fault);
      if (supervisor && this.#supervisor !== supervisor && !isControllerError(error)) {
        throw new ControllerError(
          "CONTROLLER_NOT_RUNNING",
          `${this.#name} stopped while ${args.action} was in flight`,
          {
            hint: `Start it with {"action":"start","name":"${this.#name}"} and retry.`,
            details: { name: this.#name, action: args.action },
            cause: error,
          },
        );
      }
      throw error;
    }
  }

  async #guestAction(args: Record<string, unknown> & { action: string }): Promise<unknown> {
    const supervisor = this.#requireSupervisor();
    const noop: CallContext = { progress: () => undefined };
    switch (args.action) {
      case "exec":
        return execView(
          await supervisor.exec(args.cmd as string, {
            cwd: args.cwd as string | undefined,
            timeoutMs: args.timeoutMs as number | undefined,
          }),
        );
      case "exec-status":
        return execView(
          await supervisor.execStatus(args.pid as string, { timeoutMs: args.timeoutMs as number | undefined }),
        );
      case "exec-kill":
        return supervisor.execKill(args.pid as string);
      case "read":
        return { path: args.path, ...(await supervisor.readText(args.path as string)) };
      case "write":
        return supervisor.writeFile(args.path as string, args.content as string);
      case "logs":
        return supervisor.logs(args.service as string, { lines: args.lines as number | undefined });
      case "services": {
        const names = args.service ? [args.service as string] : undefined;
        switch (args.op) {
          case "status":
            return { services: await supervisor.serviceStatus(names), previews: this.#status.previews ?? [] };
          case "stop":
            return supervisor.stopServices(names);
          case "restart":
            return this.#withPreviews(await this.#ensureServices(noop, names, true));
          default:
            return this.#withPreviews(await this.#ensureServices(noop));
        }
      }
      case "service-start":
        return this.#serviceStart(args);
      case "preview": {
        const info = await this.#gateway!.open(
          adHocPreview({
            port: args.port as number,
            title: args.title as string | undefined,
            description: args.description as string | undefined,
          }),
        );
        await this.#setState(this.#status.state, { previews: this.#gateway!.list().flatMap(previewInfoToLinks) });
        return { previews: previewInfoToLinks(info) };
      }
      case "shell": {
        const access = await this.#vm!.enableSsh({ user: (args.user as string | undefined) ?? "root" });
        return { command: access.command, user: access.user, port: access.port };
      }
      default:
        throw new ControllerError("CONTROLLER_UNKNOWN_ACTION", `the daemon does not handle ${args.action}`);
    }
  }

  #withPreviews<T extends object>(result: T): T & { previews: PreviewLinkInfo[] } {
    return { ...result, previews: this.#status.previews ?? [] };
  }

  async #serviceStart(args: Record<string, unknown>): Promise<unknown> {
    const supervisor = this.#requireSupervisor();
    const gateway = this.#gateway!;
    const name = args.service as string;
    const health = args.health as string | undefined;
    const wantsPreview = args.preview === true || (Array.isArray(args.previews) && args.previews.length > 0);
    let origin: string | undefined;
    const links: PreviewLink[] = [];
    if (wantsPreview) {
      const main: PreviewLink = { url: "/", title: (args.title as string | undefined) ?? name };
      if (args.description) main.description = args.description as string;
      if (args.preview === true) links.push(main);
      for (const entry of (args.previews as Record<string, unknown>[] | undefined) ?? []) {
        if (typeof entry.folder === "string") {
          for (const l of entry.links as PreviewLink[]) links.push({ ...l, folder: entry.folder });
        } else links.push(entry as unknown as PreviewLink);
      }
      const info = await gateway.open({ key: name, guestPort: (args.port as number | undefined) ?? 1, links });
      origin = info.origin;
    }
    const status = await supervisor.startService({
      name,
      command: args.command as string,
      cwd: args.cwd as string | undefined,
      port: args.port as number | undefined,
      env: args.env as Record<string, string> | undefined,
      health:
        health === undefined
          ? { kind: "tcp" }
          : health === "process"
            ? { kind: "process" }
            : { kind: "http", path: health },
      publicUrl: origin,
    });
    if (wantsPreview && status.port) await gateway.open({ key: name, guestPort: status.port, links });
    await this.#setState(this.#status.state, { previews: gateway.list().flatMap(previewInfoToLinks) });
    return { service: status, previews: (this.#status.previews ?? []).filter((p) => p.service === name) };
  }

  /**
   * Called every second by the daemon: a VM whose QEMU exited by itself (crash, OOM kill, someone
   * killed it) must not keep reading "running". The run is discarded (the last checkpoint stays
   * current), the status says failed with the reason, and the daemon exits.
   */
  checkVm(): void {
    const vm = this.#vm;
    const fault = vm?.fault;
    if (fault && this.#recordedFault !== fault) {
      // Recorded once; written when the host lets us (it may be the very disk that is full).
      this.#recordedFault = fault;
      this.#recordError(fault.code, fault.message);
      void this.#setState(this.#status.state).catch(() => undefined);
    }
    if (!vm || !vm.closed || this.busy || this.#exiting) return;
    void this.#queue(async () => {
      if (this.#vm !== vm) return;
      this.#recordError(
        "CONTROLLER_VM_EXITED",
        `the VM of ${this.#name} exited unexpectedly; work since the last stop is lost`,
        `Start it again with {"action":"start","name":"${this.#name}"}; the last checkpoint is intact.`,
      );
      await this.#teardown({ checkpoint: false }).catch(() => undefined);
      await this.#setState("failed", { previews: [] }).catch(() => undefined);
      this.#finish();
    }).catch(() => undefined);
  }

  /** SIGTERM: stop cleanly (checkpoint) if a VM runs. */
  async shutdown(): Promise<void> {
    // Queued behind any lifecycle work in progress (a boot finishes, then is checkpointed), so a
    // signal never leaves a half-started VM behind.
    await this.#lifecycle.add(() => this.#stop({ progress: () => undefined })).catch(() => undefined);
    this.#finish();
  }
}
