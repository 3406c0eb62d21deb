// Starting a VM on an instance disk: resources and accelerator (KVM only once a real guest kernel
// ran on it, with one TCG retry of a KVM boot that shows no sign of life), the disk run, then
// `bootAttempt` (boot-attempt.ts) for the boot itself.
import path from "node:path";
import { bootAttempt, checkKernelArgs, startTimeoutOf, type BootAttempt } from "./boot-attempt.js";
import { DiskStore, recoveryNotice, type DiskRun } from "../disk/disk-store.js";
import { hostPortsTcp } from "../egress/egress-policy.js";
import { isVmError, messageOf } from "../errors.js";
import { launcherDir } from "../filenames.js";
import { loadGondolin } from "../gondolin-loader.js";
import { hostDiskFullError, isNoSpaceError } from "../host/host-disk.js";
import {
  checkResources,
  chooseAccelerator,
  probeHost,
  recordKvmFailure,
  resolveAccelerator,
  type AcceleratorChoice,
  type ResolvedAccelerator,
} from "../host/host-facts.js";
import { qemuWords } from "../host/kvm-probe.js";
import { prepareQemuLauncher, type QemuLauncher } from "../host/qemu-process.js";
import { checkSuspendState, removeSuspendState, savedMachineOf } from "../disk/vm-memory.js";
import type { RestoreOutcome, RunningVm, StartVmOptions } from "./vm-types.js";

export { mapStartError } from "./start-errors.js";
export { gondolinVmOf } from "./booted-vm.js";
export type {
  CloseOptions,
  LiveCheckpointResult,
  RestoreOutcome,
  RunningVm,
  StartVmOptions,
  StopResult,
  SuspendResult,
  VmLogger,
  VmMount,
  VmSecret,
  VmSpec,
} from "./vm-types.js";

/**
 * Boots the instance disk in `diskDir`: checks resources and accelerator, locks the disk and
 * starts a new run layer, launches QEMU through the parent-death wrapper with Gondolin, applies
 * the network policy, and grows the guest filesystem on its first boot. A VM that fails to start
 * is always closed and its run discarded.
 */
export async function startVm(input: StartVmOptions): Promise<RunningVm> {
  const started = performance.now();
  // Absolute, because QEMU runs in the VM's run directory (see prepareQemuLauncher).
  const options = { ...input, diskDir: path.resolve(input.diskDir), stateRoot: path.resolve(input.stateRoot) };
  const { signal } = options;
  signal?.throwIfAborted();
  const logger = options.logger;
  let host = options.host ?? probeHost();
  checkResources(options.spec.resources, host);
  hostPortsTcp(options.spec.network.hostPorts ?? []); // refused before the disk is opened
  checkKernelArgs(options.kernelArgs ?? []);
  const forcedAccel = options.accelerator ?? process.env.PI_SANDBOX_ACCEL;
  const launcher = await prepareQemuLauncher(launcherDir(options.stateRoot), host.arch);
  const probeQemu = options.kvmProbeQemuPath ?? (process.env.PI_SANDBOX_TEST_KVM_PROBE_QEMU || undefined);
  if (probeQemu) host = { ...host, kvmAccessible: true };
  const gondolin = await loadGondolin(options.stateRoot);
  const store = options.diskStore ?? new DiskStore({ stateRoot: options.stateRoot });
  const openRun = async (): Promise<DiskRun> => {
    try {
      const run = await store.openRun(options.diskDir, signal ? { signal } : {});
      if (run.reapedPid !== undefined) {
        logger?.warn(`[vm ${options.name}] killed a QEMU (pid ${run.reapedPid}) left behind by a previous owner`);
      }
      return run;
    } catch (error) {
      if (isNoSpaceError(error) && !signal?.aborted) {
        throw hostDiskFullError({ dir: options.diskDir, situation: "start", name: options.name, cause: error });
      }
      throw error;
    }
  };
  let run = await openRun();
  // Only the first open can find an interrupted run: it recovers or sets it aside and drops its
  // record, and a later open (after a refused resume, on the TCG fallback) finds only this start's
  // own discarded runs. So this recovery is the start's, whichever open boots.
  const recovery = run.recovery;
  const recoveryWarnings = recovery ? [recoveryNotice(recovery)] : [];
  for (const notice of recoveryWarnings) {
    // Said now: the recovery is done even if the boot fails below.
    logger?.warn(`[vm ${options.name}] ${notice}`);
    options.onProgress?.(notice);
  }
  let resolved: ResolvedAccelerator;
  try {
    if (host.kvmAccessible && !forcedAccel?.trim()) options.onProgress?.("checking that KVM can run the guest kernel");
    resolved = await resolveAccelerator({
      qemuPath: probeQemu ?? launcher.qemuPath,
      emulatorPath: probeQemu ?? launcher.emulatorPath,
      host,
      ...(forcedAccel !== undefined ? { override: forcedAccel } : {}),
      kernelPath: run.image.kernelPath,
      cacheDir: options.stateRoot,
    });
  } catch (error) {
    await run.discard().catch(() => undefined);
    throw error;
  }
  const hostWarnings = launcherWarnings(launcher);
  for (const warning of hostWarnings) logger?.warn(`[vm ${options.name}] ${warning}`);
  let attempt: BootAttempt = {
    options,
    gondolin,
    launcher,
    started,
    warnings: [...recoveryWarnings, ...hostWarnings],
    ...(recovery ? { recovery } : {}),
  };
  const accelerator = options.machineType ? { ...resolved.choice, machineType: options.machineType } : resolved.choice;
  const resumed = await resumeSaved(attempt, run, accelerator, openRun);
  if (resumed.vm) return resumed.vm;
  run = resumed.run;
  if (resumed.restore) attempt = { ...attempt, restore: resumed.restore };
  if (accelerator.accel !== "kvm" || forcedAccel?.trim()) return bootAttempt(attempt, run, accelerator);
  // Belt and braces: the kernel probe passed, but a KVM boot that still shows no sign of life
  // within a bound (or that QEMU stops with a KVM error) is retried once on TCG, and the verdict
  // is updated so the next boots of this host boot go to TCG directly.
  const kvmBoundMs = Math.min(options.kvmReadyTimeoutMs ?? KVM_READY_TIMEOUT_MS, startTimeoutOf(options));
  try {
    return await bootAttempt(attempt, run, accelerator, kvmBoundMs);
  } catch (error) {
    if (signal?.aborted || !isVmError(error) || !KVM_RETRYABLE.has(error.code)) throw error;
    const problem =
      error.code === "VM_START_TIMEOUT"
        ? `the guest showed no sign of life within ${Math.round(kvmBoundMs / 1000)} s`
        : kvmBootProblem(String(error.details?.reason ?? error.message));
    if (resolved.kvmKey) await recordKvmFailure(options.stateRoot, resolved.kvmKey, problem).catch(() => undefined);
    const fallback = chooseAccelerator({ ...host, kvmProblem: problem });
    const notice = `KVM could not run the guest (${problem}); booting on TCG`;
    logger?.warn(`[vm ${options.name}] ${notice}`);
    options.onProgress?.(notice);
    run = await openRun();
    const { warning: _shown, ...quiet } = fallback;
    return bootAttempt({ ...attempt, warnings: [...attempt.warnings, notice] }, run, quiet);
  }
}

/**
 * Resumes the memory a suspend saved with the disk's current checkpoint, when there is one that
 * fits this machine. Otherwise (or when QEMU refuses it) says why, deletes it, and hands back an
 * open run for a cold boot of the same checkpoint. A resumed or refused state is deleted either way.
 */
async function resumeSaved(
  attempt: BootAttempt,
  run: DiskRun,
  accelerator: AcceleratorChoice,
  openRun: () => Promise<DiskRun>,
): Promise<{ vm?: RunningVm; run: DiskRun; restore?: RestoreOutcome }> {
  const { options } = attempt;
  const machine = await savedMachineOf(attempt.launcher, accelerator, options.spec.resources, run.image);
  const saved = await checkSuspendState(options.diskDir, run.pointer.generation, machine);
  if (!saved) return { run };
  let reason: string;
  if (saved.usable) {
    options.onProgress?.("resuming from saved memory");
    try {
      const readyMs = Math.min(WARM_READY_TIMEOUT_MS, startTimeoutOf(options));
      const memory = { state: saved.state, file: saved.file };
      const vm = await bootAttempt({ ...attempt, memory }, run, accelerator, readyMs);
      await removeSuspendState(options.diskDir).catch(() => undefined);
      return { vm, run };
    } catch (error) {
      if (options.signal?.aborted) throw error;
      const details = isVmError(error) ? error.details : undefined;
      reason = `QEMU could not resume it: ${String(details?.reason ?? messageOf(error))
        .split("\n")[0]!
        .slice(0, 300)}`;
      run = await openRun();
    }
  } else {
    reason = saved.reason;
  }
  await removeSuspendState(options.diskDir).catch(() => undefined);
  const notice = `the saved memory was not used (${reason}); booting the same disk checkpoint cold`;
  options.logger?.warn(`[vm ${options.name}] ${notice}`);
  options.onProgress?.(notice);
  return { run, restore: { warm: false, reason } };
}

/** A restored guest answers in seconds; one that has not within this bound gets a cold boot instead. */
const WARM_READY_TIMEOUT_MS = 60_000;

/** What the user should know about how QEMU is confined on this host. */
function launcherWarnings(launcher: QemuLauncher): string[] {
  const warnings: string[] = [];
  if (!launcher.diesWithParent) {
    warnings.push("setpriv is unavailable: QEMU may outlive a killed owner until the next start reaps it");
  }
  if (!launcher.seccomp) {
    warnings.push(
      `QEMU runs without its seccomp sandbox (${launcher.seccompProblem ?? "unsupported here"}): a guest that escaped into QEMU could start programs with your rights`,
    );
  }
  return warnings;
}

/** QEMU's own words from a failed start ("… (qemu: <stderr>)" in Gondolin's errors), else its first line. */
function kvmBootProblem(reason: string): string {
  const said = /\(qemu: ([\s\S]*)\)\s*$/.exec(reason);
  const words = said ? qemuWords(said[1]!) : "";
  return words ? `QEMU stopped: ${words}` : (reason.split("\n")[0] ?? reason).slice(0, 300);
}

/** A KVM boot bound: KVM guests are ready in a few seconds; far beyond that, KVM is the problem. */
const KVM_READY_TIMEOUT_MS = 45_000;
/** Start failures that a KVM boot retries on TCG (not a missing image, a busy disk or a full host disk). */
const KVM_RETRYABLE: ReadonlySet<string> = new Set(["VM_START_TIMEOUT", "VM_START_FAILED", "VM_KVM_FAILED"]);
