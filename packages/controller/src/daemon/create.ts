// Create and prepare: a new disk (from the config's image, or copy-on-write from a template), the
// entry's record, and the first boot through the lifecycle's steps (lifecycle.ts). A create that
// fails before its setup ran is rolled back: nothing of the instance is kept but its controller
// log, so running the same create again works.

import { copyFile, mkdir, readFile, rm } from "node:fs/promises";
import { dirname } from "node:path";
import { describeReaches, type SandboxConfig } from "@pi-sandbox/config";
import type { GuestIdentity, SupervisorClient } from "@pi-sandbox/supervisor";
import { ControllerError } from "../errors.js";
import type { EntryView } from "../state/inspect.js";
import { resolveReaches } from "../state/config-trust.js";
import { readRecord, readStatus, writeRecord, type EntryRecord, type EntryStatus } from "../state/records.js";
import type { ProgressEvent } from "../wire.js";
import type { ConfigSource } from "../actions/kit/context.js";
import { IDENTITY_PROGRESS, newGuestIdentity } from "./guest-identity.js";
import { installGuestConfig, readConfigFile, runSetup } from "./guest-setup.js";
import { withImageDir } from "../image-ref.js";
import { recordedPreviewAddress, releasePreviewAddress } from "./preview-address.js";
import { copyAgentDoor } from "./agent-door.js";
import type { InstanceRuntime, RuntimeVm } from "./runtime.js";
import { newSecretSalt } from "./secrets.js";
import { toControllerError, type InstanceState } from "./state.js";

type Progress = (event: ProgressEvent) => void;

/** How the lifecycle boots an instance disk (see `Lifecycle.boot`). */
export interface BootOptions {
  pendingCreate?: NonNullable<EntryRecord["pendingCreate"]>;
  /** The pending create is one whose daemon died (a start finishes it), not a create's own first boot. */
  interrupted?: boolean;
  /** Set once setup ran (or was not due): a failure after it keeps the instance. */
  setupDone?: boolean;
  secretSalt: string;
  /** The status a suspend left: its previews come back on a warm start. */
  suspended?: EntryStatus;
}

/** What create and prepare use of the lifecycle. */
export interface CreateSteps {
  readonly state: InstanceState;
  readonly runtime: InstanceRuntime;
  /** Boots the instance disk, starts the agent, finishes a pending create, runs resume and services. */
  boot(config: SandboxConfig, progress: Progress, options: BootOptions): Promise<void>;
  /** Boots a disk (host ports, mounts and secrets checked first) and opens the instance's gateway. */
  /** `freshDisk`: new from an image, with no agent on it yet (see InstanceRuntime.bootVm's `seedAgent`). */
  bootVm(
    diskDir: string,
    config: SandboxConfig,
    progress: Progress,
    secretSalt: string,
    freshDisk: boolean,
  ): Promise<RuntimeVm>;
  /** Starts the guest agent. */
  startAgent(
    vm: RuntimeVm,
    config: SandboxConfig,
    progress: Progress,
    identity?: GuestIdentity,
  ): Promise<SupervisorClient>;
  /** Cuts previews and the agent, then checkpoints or discards the VM run (`keepMemory`: a suspend). */
  teardown(options: { checkpoint: boolean; keepMemory?: boolean }): Promise<{ memoryBytes?: number } | undefined>;
  /** Records a failed start and tears the run down. */
  failStart(error: unknown): Promise<void>;
}

/**
 * One line naming what the config reaches on the host (its marked keys, host paths resolved), before
 * anything is done with it.
 */
async function noticeReaches(config: SandboxConfig, progress: (event: ProgressEvent) => void): Promise<void> {
  const declares = describeReaches(await resolveReaches(config, process.env));
  if (declares.length > 0)
    progress({ stage: "config", message: `this config reaches the host: ${declares.join("; ")}` });
}

/** The config with `idle.suspendAfter` replaced by `idleSuspendMs` (`--idle-suspend`); 0 turns it off. */
export function withIdleSuspend(config: SandboxConfig, idleSuspendMs: number): SandboxConfig {
  const { idle: _old, ...rest } = config;
  return idleSuspendMs > 0 ? { ...rest, idle: { suspendAfterMs: idleSuspendMs } } : rest;
}

/**
 * A new instance: a disk from the config's image or a copy-on-write one from a template, its
 * record (with `pendingCreate` until the first checkpoint), then the first boot. A create that
 * fails before its setup ran leaves nothing behind.
 */
export async function createInstance(
  steps: CreateSteps,
  source: ConfigSource & { template?: string; idleSuspendMs?: number },
  progress: Progress,
): Promise<EntryView> {
  const { state, runtime } = steps;
  const { name, layout } = state;
  const existing = await readRecord(layout, "instances", name);
  if (existing) {
    // A running instance's first run is not checkpointed yet, but its create is not interrupted.
    const interrupted = existing.pendingCreate !== undefined && !state.vm;
    throw new ControllerError(
      "CONTROLLER_ALREADY_EXISTS",
      interrupted
        ? `an instance named ${name} already exists; its create was interrupted before its first checkpoint`
        : `an instance named ${name} already exists`,
      {
        hint: interrupted
          ? `Finish it with {"action":"start","name":"${name}"} (start runs the rest of the create, setup included), or destroy it first.`
          : `Start it with {"action":"start","name":"${name}"}, or destroy it first.`,
        details: { name },
      },
    );
  }
  const diskDir = layout.diskDir("instances", name);
  await rm(diskDir, { recursive: true, force: true });
  let config: SandboxConfig;
  let configText: string | undefined;
  const record: Omit<EntryRecord, "config"> & { secretSalt: string } = {
    kind: "instances",
    name: name,
    createdAt: new Date().toISOString(),
    secretSalt: newSecretSalt(),
  };
  if (source.config !== undefined) {
    ({ config, text: configText } = await readConfigFile(source.config, source.configSha256));
    await noticeReaches(config, progress);
    config = await withImageDir(config);
    record.configPath = source.config;
    progress({ stage: "disk", message: `creating a ${config.diskGiB} GiB disk` });
    await runtime.disks.createDisk(diskDir, {
      ...(config.image ? { image: config.image } : {}),
      diskGiB: config.diskGiB,
    });
  } else {
    const template = source.template!;
    const templateRecord = await readRecord(layout, "templates", template);
    const templateStatus = await readStatus(layout, "templates", template);
    if (!templateRecord || templateStatus?.state !== "prepared") {
      throw new ControllerError("CONTROLLER_NOT_FOUND", `no prepared template named ${template}`, {
        hint: 'List templates with {"action":"list","kind":"templates"}; make one with prepare.',
        details: { template },
      });
    }
    config = templateRecord.config;
    record.template = template;
    // The template's disk may hold placeholders its setup stored: they must keep working here.
    if (templateRecord.secretSalt) record.secretSalt = templateRecord.secretSalt;
    progress({ stage: "disk", message: `creating a copy-on-write disk from template ${template}` });
    const disk = await runtime.disks.createFromTemplate(layout.diskDir("templates", template), diskDir);
    if (disk.memoryBytes > 0) {
      progress({ stage: "disk", message: `the template saved its memory: ${name} resumes it instead of booting` });
      await copyAgentDoor(layout, template, name);
    }
  }
  // Until the first checkpoint holds the guest config and setup's work, the record says so: a
  // daemon that dies before then (its run is dropped) leaves an instance whose next start
  // finishes the create.
  if (source.idleSuspendMs !== undefined) config = withIdleSuspend(config, source.idleSuspendMs);
  // Every new guest gets its own identity at its first boot: an image's copy would otherwise share
  // the image's hostname and empty machine-id, a template's copy the template's.
  const pendingCreate = {
    ...(configText !== undefined ? { configText } : {}),
    newIdentity: true,
    ...(record.template === undefined ? { freshDisk: true } : {}),
  };
  await writeRecord(layout, { ...record, config, pendingCreate });
  const first = { pendingCreate, setupDone: false, secretSalt: record.secretSalt };
  try {
    await steps.boot(config, progress, first);
  } catch (error) {
    // A create that failed before its setup ran leaves nothing behind, so running it again just
    // works; the controller log is kept outside the removed entry.
    if (!first.setupDone) throw await rollBackCreate(steps, error);
    await steps.failStart(error);
    throw error;
  }
  return state.view();
}

/** Removes a half-made instance; returns the error to report, with the kept log's place and tail. */
async function rollBackCreate(steps: CreateSteps, error: unknown): Promise<ControllerError> {
  const { state, runtime } = steps;
  const { name, layout, log } = state;
  const e = toControllerError(error);
  log.warn(`create failed, removing ${name}: ${e.code}: ${e.message}`);
  await steps.teardown({ checkpoint: false }).catch(() => undefined);
  await runtime.disks.destroy(layout.diskDir("instances", name)).catch(() => undefined);
  const logFile = layout.failedCreateLogFile(name);
  let logTail = "";
  try {
    await mkdir(dirname(logFile), { recursive: true, mode: 0o700 });
    await copyFile(layout.logFile("instances", name), logFile);
    logTail = (await readFile(logFile, "utf8")).split("\n").slice(-21).join("\n").trim();
  } catch (copyError) {
    log.warn(`keeping the log of the failed create: ${String(copyError)}`);
  }
  const address = await recordedPreviewAddress(layout, name);
  await rm(layout.entryDir("instances", name), { recursive: true, force: true }).catch(() => undefined);
  await releasePreviewAddress(layout, name, address).catch(() => undefined);
  state.finish();
  return new ControllerError(e.code, e.message, {
    hint: `${e.hint ? `${e.hint} ` : ""}Nothing of ${name} was kept: fix the cause and run create again. The controller log is at ${logFile}.`,
    details: { ...e.details, logFile, logTail },
    cause: error,
  });
}

/**
 * A template: a fresh disk, the guest config and setup, then the disk published; a failure
 * publishes nothing. With `suspend`, its services are started and the guest is saved running
 * (memory and disk): instances made from it resume that instead of booting.
 */
export async function prepareTemplate(
  steps: CreateSteps,
  source: ConfigSource & { config: string; suspend?: boolean },
  progress: Progress,
): Promise<EntryView> {
  const { state, runtime } = steps;
  const { name, layout } = state;
  if (await readRecord(layout, "templates", name)) {
    throw new ControllerError("CONTROLLER_ALREADY_EXISTS", `a template named ${name} already exists`, {
      hint: `Destroy it first with {"action":"destroy","name":"${name}","confirm":"${name}","kind":"templates"}.`,
      details: { name },
    });
  }
  const read = await readConfigFile(source.config, source.configSha256);
  await noticeReaches(read.config, progress);
  const config = await withImageDir(read.config);
  const configText = read.text;
  const secretSalt = newSecretSalt();
  const templateDir = layout.diskDir("templates", name);
  const workDir = templateDir + ".work";
  await rm(workDir, { recursive: true, force: true });
  await rm(templateDir, { recursive: true, force: true });
  progress({ stage: "disk", message: `creating a ${config.diskGiB} GiB disk` });
  await runtime.disks.createDisk(workDir, {
    ...(config.image ? { image: config.image } : {}),
    diskGiB: config.diskGiB,
  });
  try {
    await state.setState("starting");
    const vm = await steps.bootVm(workDir, config, progress, secretSalt, true);
    const supervisor = await steps.startAgent(vm, config, progress, newGuestIdentity(name));
    progress({ stage: "boot", message: IDENTITY_PROGRESS });
    if (!supervisor.identityApplied) await runtime.giveOwnIdentity(supervisor, name);
    await installGuestConfig(supervisor, configText);
    const setup = await runSetup(supervisor, config, progress);
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
    if (source.suspend) await startTemplateServices(supervisor, config, progress);
    progress({
      stage: "checkpoint",
      message: source.suspend ? "saving the prepared disk and memory" : "saving the prepared disk",
    });
    await steps.teardown({ checkpoint: true, keepMemory: source.suspend === true });
    const template = await runtime.disks.createTemplate(workDir, templateDir);
    await runtime.disks.destroy(workDir);
    await writeRecord(layout, {
      kind: "templates",
      name: name,
      createdAt: new Date().toISOString(),
      configPath: source.config,
      config,
      secretSalt,
    });
    await state.setState("prepared", {
      setup: { exitCode: setup.exitCode, at: new Date().toISOString() },
      ...(template.memoryBytes > 0 ? { savedMemory: { bytes: template.memoryBytes } } : {}),
    });
    progress({ stage: "done", message: `template ${name} is ready` });
    return await state.view();
  } catch (error) {
    await steps.teardown({ checkpoint: false }).catch(() => undefined);
    await runtime.disks.destroy(workDir).catch(() => undefined);
    await rm(layout.entryDir("templates", name), { recursive: true, force: true }).catch(() => undefined);
    throw error;
  } finally {
    state.finish();
  }
}

/**
 * Starts a template's services before it is saved running. They get no preview URL (a template has
 * no previews): a service whose environment refers to one fails here, and nothing is published.
 */
async function startTemplateServices(supervisor: SupervisorClient, config: SandboxConfig, progress: Progress) {
  progress({ stage: "services", message: "starting services, to be saved running" });
  const result = await supervisor.ensureServices(undefined, { config });
  const failure = result.failures[0];
  if (failure) {
    throw new ControllerError(failure.code, `${failure.message}; no template was published`, {
      hint:
        failure.hint ??
        "Fix the service in the sandbox.yaml (a service saved in a template gets no preview URL), or prepare without --suspend.",
      details: { service: failure.service, ...(failure.logPath ? { logPath: failure.logPath } : {}) },
    });
  }
  progress({ stage: "services", message: `${result.services.length} service(s) running` });
}
