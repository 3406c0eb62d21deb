import { randomBytes } from "node:crypto";
import fsp from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { Duplex } from "node:stream";
import type { VM, VMOptions } from "@earendil-works/gondolin";
import { VmError, isVmError, messageOf } from "./errors.js";
import { DiskStore, type CheckpointResult, type DiskRun } from "./disk-store.js";
import { egressPolicy, hostPortsTcp } from "./egress-policy.js";
import { runInGuest } from "./exec-util.js";
import { GondolinGuest } from "./gondolin-guest.js";
import { gondolinCertDir, loadGondolin } from "./gondolin-loader.js";
import { dialMappedTcpOnConnect } from "./gondolin-private.js";
import { GuestFault } from "./guest-fault.js";
import { hostDiskFullError, hostSpaceOf, isNoSpaceError } from "./host-disk.js";
import type { GuestExecOptions, GuestExecution, GuestSshAccess, GuestSshOptions, GuestVm } from "./guest-vm.js";
import {
  checkResources,
  chooseAccelerator,
  probeHost,
  qemuMemory,
  recordKvmFailure,
  resolveAccelerator,
  type AcceleratorChoice,
  type HostFacts,
  type ResolvedAccelerator,
  type VmResources,
} from "./host.js";
import { qemuWords } from "./kvm-probe.js";
import { isAlive, waitFor } from "./process-util.js";
import { prepareQemuLauncher, writeQemuPidRecord, type QemuLauncher } from "./qemu-process.js";
import { QMP_SOCKET_NAME, QmpMonitor, type IoErrorPause } from "./qmp.js";

/** What booting needs from a sandbox config (`SandboxConfig` of `@pi-sandbox/config` fits). */
export interface VmSpec {
  /** CPUs and memory. */
  resources: VmResources;
  /** Disk size in GiB (used when the disk is created). */
  diskGiB: number;
  /** Absolute Gondolin assets directory; default: Gondolin's own lookup. Used when the disk is created. */
  image?: string;
  /** Egress policy. */
  network: {
    /** Host patterns the guest may reach over HTTP(S); empty = nothing outbound. */
    allowedHosts: readonly string[];
    /**
     * Host `127.0.0.1` ports the guest reaches over TCP as `host.sandbox.internal:<port>`
     * (`HOST_SERVICES_HOSTNAME`); default none. Unique whole numbers 1-65535, else
     * VM_RESOURCES_UNSUPPORTED.
     */
    hostPorts?: readonly number[];
  };
}

/** A small injected logger; the package never prints. */
export interface VmLogger {
  /** Normal progress. */
  info(message: string): void;
  /** Something slow or degraded the user should know once (e.g. software emulation). */
  warn(message: string): void;
  /** Gondolin/QEMU debug output when `debug` is on. */
  debug?(message: string): void;
}

/** Options of {@link startVm}. */
export interface StartVmOptions {
  /** Identity for logs and Gondolin's session label (e.g. the instance name). */
  name: string;
  /** The instance disk directory (created with {@link DiskStore}). */
  diskDir: string;
  /** Resources and network policy (disk size and image were fixed when the disk was created). */
  spec: Pick<VmSpec, "resources" | "network">;
  /**
   * Directory for this package's runtime files shared by VMs: the QEMU wrapper (`bin/`), per-VM
   * sockets (`run/`), Gondolin's session registry and MITM CA (`gondolin/`).
   */
  stateRoot: string;
  /** Injected logger. */
  logger?: VmLogger;
  /** Cancels the boot (the VM is closed and the run discarded). */
  signal?: AbortSignal;
  /** Deadline for the guest to get ready, in ms (default 180000: TCG boots take 10-30 s). */
  startTimeoutMs?: number;
  /** Host facts (default: probed now). */
  host?: HostFacts;
  /** Force an accelerator (default: `PI_SANDBOX_ACCEL`, else chosen from the host). */
  accelerator?: string;
  /** Host patterns allowed to resolve to internal/private addresses (e.g. a host-side test server). */
  allowedInternalHosts?: readonly string[];
  /** Forward the guest console and Gondolin protocol debug to `logger.debug`. */
  debug?: boolean;
  /** The disk store to open the disk with (default: a new one). */
  diskStore?: DiskStore;
  /** Live progress for the user (the KVM check, a fall-back to TCG). */
  onProgress?: (message: string) => void;
  /** How long a KVM boot may take before it is retried on TCG, in ms (default 45000). */
  kvmReadyTimeoutMs?: number;
  /**
   * Test seam: a QEMU that answers the KVM probe instead of the real one, with `/dev/kvm` taken as
   * accessible, to play a host shape (a nested PVM, an abort at reset). The boot itself runs the
   * real QEMU. Default: `PI_SANDBOX_TEST_KVM_PROBE_QEMU`, so tests can set it for a daemon.
   */
  kvmProbeQemuPath?: string;
}

/** How a stop went. */
export interface StopResult extends CheckpointResult {
  /** Milliseconds the guest took to sync and freeze its filesystem. */
  syncMs: number;
  /** Milliseconds to close QEMU. */
  closeMs: number;
  /** Total milliseconds. */
  totalMs: number;
}

/** A booted VM on an instance disk. `stop()` checkpoints; `close()` discards the run. */
export interface RunningVm extends GuestVm {
  /** The disk directory. */
  readonly diskDir: string;
  /** Accelerator, machine and CPU model in use. */
  readonly accelerator: AcceleratorChoice;
  /** Notes for the user (e.g. software emulation), also sent to `logger.warn`. */
  readonly warnings: readonly string[];
  /** Milliseconds from `startVm` to the guest being ready. */
  readonly bootMs: number;
  /**
   * Why the guest cannot answer any more while QEMU still runs, else undefined: `VM_HOST_DISK_FULL`
   * when QEMU paused the guest on a write the full host file system refused. Every guest operation
   * then fails at once with this error; `stop()` resumes and saves if space was freed since.
   */
  readonly fault: VmError | undefined;
  /**
   * Syncs and freezes the guest filesystem, closes QEMU, and makes the disk state current
   * atomically. If the guest cannot confirm the sync (hung, exited), nothing is published: the
   * previous checkpoint stays current and VM_CHECKPOINT_FAILED is thrown; if the host file system
   * is full (the guest is paused on it and no space was freed), VM_HOST_DISK_FULL, likewise with
   * the previous checkpoint current. Single-flight; not cancellable once begun (bounded by
   * `syncTimeoutMs`).
   */
  stop(options?: { syncTimeoutMs?: number }): Promise<StopResult>;
  /** Closes the VM WITHOUT a checkpoint: everything written since start is dropped. Idempotent. */
  close(): Promise<void>;
  /** Same as `close()`. */
  [Symbol.asyncDispose](): Promise<void>;
}

const DEFAULT_START_TIMEOUT_MS = 180_000;
const DEFAULT_SYNC_TIMEOUT_MS = 120_000;
// `quiet` saves ~0.8 s of serial output per boot on TCG. The root device is Gondolin's default.
const KERNEL_APPEND = "console=ttyS0 initramfs_async=1 quiet";
// Flush everything, then freeze the root filesystem so nothing more reaches the disk before QEMU
// goes; fsfreeze is optional (sync alone leaves a consistent, if not clean, file system).
const QUIESCE_SCRIPT =
  "sync; if command -v fsfreeze >/dev/null 2>&1; then fsfreeze -f / 2>/dev/null || sync; fi; echo quiesced";
const RESIZE_SCRIPT = ["command -v resize2fs >/dev/null 2>&1 || exit 127", "resize2fs /dev/vda 2>&1"].join("\n");
/** Longest unix socket path we allow (the kernel's limit is 107 bytes). */
const MAX_SOCKET_PATH = 100;
/** A stop resumes a guest paused on a full host disk only with at least this much free again. */
const RESUME_MIN_FREE_BYTES = 16 * 1024 * 1024;

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
  const forcedAccel = options.accelerator ?? process.env.PI_SANDBOX_ACCEL;
  const launcher = await prepareQemuLauncher(path.join(options.stateRoot, "bin"), host.arch);
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
  const attempt = { options, gondolin, launcher, started, warnings: launcherWarnings(launcher) };
  for (const warning of attempt.warnings) logger?.warn(`[vm ${options.name}] ${warning}`);
  const accelerator = resolved.choice;
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

function startTimeoutOf(options: StartVmOptions): number {
  return options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS;
}

interface BootAttempt {
  options: StartVmOptions;
  gondolin: Awaited<ReturnType<typeof loadGondolin>>;
  launcher: { qemuPath: string };
  started: number;
  warnings: string[];
}

/**
 * One boot of an opened disk run on one accelerator. Closes everything and discards the run when
 * it fails. `readyTimeoutMs` bounds the wait for the guest (default: the start timeout).
 */
async function bootAttempt(
  attempt: BootAttempt,
  run: DiskRun,
  accelerator: AcceleratorChoice,
  readyTimeoutMs = startTimeoutOf(attempt.options),
): Promise<RunningVm> {
  const { options, gondolin, launcher } = attempt;
  const { signal, logger } = options;
  const warnings = [...attempt.warnings];
  if (accelerator.warning) {
    warnings.push(accelerator.warning);
    logger?.warn(`[vm ${options.name}] ${accelerator.warning}`);
  }
  let vm: VM | undefined;
  let guest: GondolinGuest | undefined;
  let runtimeDir: string | undefined;
  let monitor: QmpMonitor | undefined;
  const fault = new GuestFault();
  const cleanup = async () => {
    monitor?.close();
    const pid = vm?.getHostPid() ?? undefined;
    await guest?.close().catch(() => undefined);
    if (!guest) await vm?.close().catch(() => undefined);
    await ensureQemuGone(pid);
    if (runtimeDir) await fsp.rm(runtimeDir, { recursive: true, force: true }).catch(() => undefined);
    await run.discard().catch(() => undefined);
  };
  try {
    runtimeDir = await makeRuntimeDir(options.stateRoot);
    // QEMU (through our wrapper) listens on this socket from early in its start; a guest paused
    // on a full host disk is reported here, during the boot as much as later, and so is a KVM
    // internal error (QEMU stops the guest with run state internal-error).
    monitor = new QmpMonitor(path.join(runtimeDir, QMP_SOCKET_NAME), {
      onIoErrorPause: (pause) => {
        if (fault.raise(pausedGuestError(pause, options.name, options.diskDir))) {
          logger?.warn(`[vm ${options.name}] ${fault.current!.message}`);
        }
      },
      onInternalError: () => {
        fault.raise(
          new VmError("VM_KVM_FAILED", `QEMU stopped the guest of ${options.name} on a KVM internal error`, {
            details: { reason: "KVM internal error", accelerator: accelerator.accel },
          }),
        );
      },
    });
    const policy = egressPolicy(gondolin, {
      allowedHosts: options.spec.network.allowedHosts,
      ...(options.allowedInternalHosts ? { allowedInternalHosts: options.allowedInternalHosts } : {}),
      ...(options.spec.network.hostPorts ? { hostPorts: options.spec.network.hostPorts } : {}),
    });
    const image = run.image;
    const vmOptions: VMOptions = {
      sandbox: {
        imagePath: image.dir ?? {
          kernelPath: image.kernelPath,
          initrdPath: image.initrdPath,
          rootfsPath: image.rootfsPath,
        },
        qemuPath: launcher.qemuPath,
        rootDiskPath: run.layerPath,
        rootDiskFormat: "qcow2",
        rootDiskReadOnly: false,
        rootDiskDeleteOnClose: false,
        accel: accelerator.accel,
        machineType: accelerator.machineType,
        cpu: accelerator.cpu,
        append: KERNEL_APPEND,
        console: options.debug ? "stdio" : "none",
        mitmCertDir: gondolinCertDir(options.diskDir),
        virtioSocketPath: path.join(runtimeDir, "ctl.sock"),
        virtioFsSocketPath: path.join(runtimeDir, "fs.sock"),
        virtioSshSocketPath: path.join(runtimeDir, "ssh.sock"),
        virtioIngressSocketPath: path.join(runtimeDir, "ing.sock"),
        netSocketPath: path.join(runtimeDir, "net.sock"),
        ...(options.debug ? { debug: ["protocol"] as const } : {}),
      },
      memory: qemuMemory(options.spec.resources.memoryGiB),
      cpus: options.spec.resources.cpus,
      httpHooks: policy.httpHooks,
      env: policy.env,
      dns: policy.dns,
      ...(policy.tcp ? { tcp: policy.tcp } : {}),
      startTimeoutMs: readyTimeoutMs,
      sessionLabel: `pi-sandbox ${options.name}`,
      ...(options.debug && logger?.debug
        ? {
            debugLog: (component: string, message: string) =>
              logger.debug?.(`[vm ${options.name}] ${component}: ${message}`),
          }
        : {}),
    };
    vm = await gondolin.VM.create(vmOptions);
    if (policy.tcp && !dialMappedTcpOnConnect(vm)) {
      logger?.warn(
        `[vm ${options.name}] this Gondolin cannot dial host ports when the guest connects: a host service whose server speaks first waits for the guest's first byte`,
      );
    }
    // Record QEMU's pid as soon as it exists (not after the ~10 s boot), so a later owner can
    // reap it even if this process dies while the guest is still booting.
    const booting = vm;
    let recorded: Promise<void> | undefined;
    const recorder = setInterval(() => {
      const pid = booting.getHostPid();
      if (pid === null || recorded) return;
      recorded = writeQemuPidRecord(options.diskDir, pid).catch(() => undefined);
      clearInterval(recorder);
    }, 50);
    try {
      await fault.race(startWithSignal(vm, signal));
    } finally {
      clearInterval(recorder);
    }
    await recorded;
    guest = new GondolinGuest(options.name, vm, fault);
    const pid = vm.getHostPid();
    if (pid !== null && !recorded) await writeQemuPidRecord(options.diskDir, pid);
    let grown = run.pointer.grown;
    if (!grown) {
      await growFilesystem(guest, signal);
      grown = true;
    }
    const bootMs = performance.now() - attempt.started;
    logger?.info(`[vm ${options.name}] ready in ${Math.round(bootMs)} ms (${accelerator.accel})`);
    return new BootedVm(options.name, guest, monitor, run, runtimeDir, accelerator, warnings, bootMs, grown);
  } catch (error) {
    await cleanup();
    if (signal?.aborted) throw signal.reason;
    throw mapStartError(error, options.diskDir, options.name);
  }
}

/** The fault raised when QEMU paused the guest on a failed disk request. */
function pausedGuestError(pause: IoErrorPause, name: string, diskDir: string): VmError {
  const details = { operation: pause.operation, reason: pause.reason, device: pause.device };
  // QEMU's default policy (werror=enospc) pauses only on ENOSPC; anything else is reported to the
  // guest. So a pause whose event we missed is a full disk as well.
  if (pause.nospace === false) {
    return new VmError(
      "VM_DISK_FAILED",
      `the host failed a ${pause.operation ?? "disk"} request of ${name}'s disk in ${diskDir} (${pause.reason ?? "I/O error"}), and QEMU paused the guest; check the host disk, then stop and start ${name}`,
      { details: { dir: diskDir, name, ...details } },
    );
  }
  return hostDiskFullError({ dir: diskDir, situation: "running", name, details });
}

/**
 * Waits for QEMU to be gone, SIGKILLing it if Gondolin's close gave up (it stops waiting after
 * 10 s): a layer must never be published, deleted or unlocked while a QEMU may still write it.
 */
async function ensureQemuGone(pid: number | undefined): Promise<void> {
  if (pid === undefined) return;
  if (await waitFor(() => !isAlive({ pid }), 15_000)) return;
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // already gone
  }
  await waitFor(() => !isAlive({ pid }), 5_000);
}

async function startWithSignal(vm: VM, signal: AbortSignal | undefined): Promise<void> {
  const starting = vm.start();
  if (!signal) return starting;
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
  });
  try {
    await Promise.race([starting, aborted]);
  } finally {
    signal.removeEventListener("abort", onAbort!);
    starting.catch(() => undefined);
  }
}

async function growFilesystem(guest: GondolinGuest, signal: AbortSignal | undefined): Promise<void> {
  const result = await runInGuest(guest, ["/bin/sh", "-c", RESIZE_SCRIPT], signal ? { signal } : {});
  if (result.exitCode === 127) {
    throw new VmError(
      "VM_IMAGE_MISSING_TOOL",
      "the guest image has no resize2fs, which growing the disk to diskGiB needs; use an image with e2fsprogs",
      { details: { tool: "resize2fs", needs: "disk resize" } },
    );
  }
  if (result.exitCode !== 0) {
    throw new VmError("VM_START_FAILED", `growing the guest filesystem failed (resize2fs exit ${result.exitCode})`, {
      details: { output: (result.stdout + result.stderr).trim() },
    });
  }
}

/**
 * A per-VM directory for unix sockets, short enough for the 107-byte socket path limit. It is
 * always a new directory, and checked to be ours and private: whoever can write to it can put a
 * socket in QEMU's or Gondolin's place.
 */
async function makeRuntimeDir(stateRoot: string): Promise<string> {
  const id = randomBytes(4).toString("hex");
  const preferred = path.join(stateRoot, "run", id);
  let dir: string;
  if (path.join(preferred, "ing.sock").length <= MAX_SOCKET_PATH) {
    await fsp.mkdir(path.dirname(preferred), { recursive: true, mode: 0o700 });
    // Not recursive: an existing directory (or a link in its place) fails with EEXIST, never reused.
    await fsp.mkdir(preferred, { mode: 0o700 });
    dir = preferred;
  } else {
    // Under the shared temp dir: mkdtemp creates a fresh 0700 directory with a random name.
    dir = await fsp.mkdtemp(path.join(os.tmpdir(), "pisb-"));
  }
  const info = await fsp.lstat(dir);
  const uid = typeof process.getuid === "function" ? process.getuid() : info.uid;
  if (!info.isDirectory() || info.uid !== uid || (info.mode & 0o077) !== 0) {
    throw new VmError(
      "VM_START_FAILED",
      `the VM's socket directory ${dir} is not a private directory of this user (mode ${(info.mode & 0o777).toString(8)}, uid ${info.uid}); set TMPDIR to a directory only you can write to`,
      { details: { dir, uid: info.uid, mode: (info.mode & 0o777).toString(8) } },
    );
  }
  return dir;
}

/** Turns Gondolin/QEMU start failures into typed errors; the raw text goes to details and cause. */
export function mapStartError(error: unknown, diskDir: string, name?: string): unknown {
  if (isNoSpaceError(error)) {
    return hostDiskFullError({ dir: diskDir, situation: "start", ...(name ? { name } : {}), cause: error });
  }
  if (isVmError(error)) return error;
  const message = messageOf(error);
  const code = (error as { code?: unknown }).code;
  const details = { diskDir, reason: message };
  if (code === "vm_start_timeout" || /startup timed out/.test(message)) {
    return new VmError(
      "VM_START_TIMEOUT",
      "the guest did not get ready in time; the host may be overloaded (software emulation is slow) — retry, or raise the start timeout",
      { cause: error, details },
    );
  }
  if (/Failed to get "?\w+"? lock|Is another process using the image/.test(message)) {
    return new VmError("VM_DISK_BUSY", `another QEMU is using the disk in ${diskDir}; stop that VM first`, {
      cause: error,
      details,
    });
  }
  if (code === "ENOENT" && /qemu/i.test(message)) {
    return new VmError("VM_QEMU_MISSING", "QEMU could not be executed; install qemu-system for this architecture", {
      cause: error,
      details,
    });
  }
  const missing = /Could not open '([^']+)': No such file or directory/.exec(message);
  if (missing) {
    return new VmError("VM_IMAGE_NOT_FOUND", `QEMU could not open ${missing[1]}; restore it or recreate the instance`, {
      cause: error,
      details: { ...details, path: missing[1] },
    });
  }
  return new VmError("VM_START_FAILED", `the VM failed to boot: ${firstLine(message)}`, { cause: error, details });
}

function firstLine(text: string): string {
  return (text.split("\n").find((line) => line.trim() !== "") ?? text).slice(0, 300);
}

/** The Gondolin VM under a `RunningVm` from {@link startVm}; undefined for any other GuestVm. */
export function gondolinVmOf(vm: RunningVm): VM | undefined {
  return vm instanceof BootedVm ? vm.gondolinVm() : undefined;
}

class BootedVm implements RunningVm {
  private stopping: Promise<StopResult> | undefined;
  private closing: Promise<void> | undefined;

  constructor(
    readonly name: string,
    private readonly guest: GondolinGuest,
    private readonly monitor: QmpMonitor,
    private readonly run: DiskRun,
    private readonly runtimeDir: string,
    readonly accelerator: AcceleratorChoice,
    readonly warnings: readonly string[],
    readonly bootMs: number,
    private readonly grown: boolean,
  ) {}

  /** The Gondolin VM underneath, for comparisons in `./testing` only. */
  gondolinVm(): VM {
    return this.guest.gondolin;
  }

  get diskDir(): string {
    return this.run.dir;
  }

  get hostPid(): number | undefined {
    return this.guest.hostPid;
  }

  get closed(): boolean {
    return this.guest.closed || this.stopping !== undefined || this.closing !== undefined;
  }

  get fault(): VmError | undefined {
    return this.guest.closed ? undefined : this.guest.fault.current;
  }

  exec(command: string | readonly string[], options?: GuestExecOptions): GuestExecution {
    return this.guest.exec(command, options);
  }

  readFile(file: string, options?: { signal?: AbortSignal }): Promise<Buffer> {
    return this.guest.readFile(file, options);
  }

  writeFile(file: string, data: string | Buffer, options?: { signal?: AbortSignal }): Promise<void> {
    return this.guest.writeFile(file, data, options);
  }

  connectTcp(port: number, options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<Duplex> {
    return this.guest.connectTcp(port, options);
  }

  enableSsh(options?: GuestSshOptions): Promise<GuestSshAccess> {
    return this.guest.enableSsh(options);
  }

  stop(options: { syncTimeoutMs?: number } = {}): Promise<StopResult> {
    if (this.closing) {
      return Promise.reject(
        new VmError("VM_CLOSED", `the VM ${this.name} was closed without a checkpoint`, {
          details: { name: this.name },
        }),
      );
    }
    this.stopping ??= this.stopOnce(options.syncTimeoutMs ?? DEFAULT_SYNC_TIMEOUT_MS);
    return this.stopping;
  }

  private async stopOnce(syncTimeoutMs: number): Promise<StopResult> {
    const started = performance.now();
    const pid = this.guest.hostPid;
    let syncError: unknown;
    if (this.guest.exitedByItself) {
      syncError = new Error("QEMU exited by itself before the stop");
    } else if (this.guest.fault.current && !(await this.resumeIfRoom())) {
      syncError = this.guest.fault.current;
    } else {
      try {
        const result = await runInGuest(this.guest, ["/bin/sh", "-c", QUIESCE_SCRIPT], {
          signal: AbortSignal.timeout(syncTimeoutMs),
        });
        if (result.exitCode !== 0 || !result.stdout.includes("quiesced")) {
          syncError = new Error(`guest sync exited with ${result.exitCode}: ${result.stderr.trim()}`);
        }
      } catch (error) {
        syncError = error;
      }
    }
    const syncMs = performance.now() - started;
    const closeStarted = performance.now();
    this.monitor.close();
    await this.guest.close().catch(() => undefined);
    await ensureQemuGone(pid);
    const closeMs = performance.now() - closeStarted;
    await fsp.rm(this.runtimeDir, { recursive: true, force: true }).catch(() => undefined);
    if (syncError !== undefined) {
      await this.run.discard().catch(() => undefined);
      if (isVmError(syncError, "VM_HOST_DISK_FULL")) {
        throw hostDiskFullError({ dir: this.diskDir, situation: "stop", name: this.name, cause: syncError });
      }
      throw new VmError(
        "VM_CHECKPOINT_FAILED",
        `the guest of ${this.name} did not confirm that its disk was synced, so nothing since the start was saved; the previous checkpoint is still current`,
        { cause: syncError, details: { name: this.name, reason: messageOf(syncError) } },
      );
    }
    let checkpoint: CheckpointResult;
    try {
      checkpoint = await this.run.checkpoint({ grown: this.grown });
    } catch (error) {
      if (isVmError(error, "VM_HOST_DISK_FULL")) {
        throw hostDiskFullError({ dir: this.diskDir, situation: "stop", name: this.name, cause: error });
      }
      throw error;
    }
    return { ...checkpoint, syncMs, closeMs, totalMs: performance.now() - started };
  }

  /**
   * For a guest paused on a full host disk: if space was freed since, lets QEMU retry the failed
   * writes and run on (a new pause raises the fault again). Resolves whether the guest runs.
   */
  private async resumeIfRoom(): Promise<boolean> {
    const space = hostSpaceOf(this.diskDir);
    if (!space || space.freeBytes < RESUME_MIN_FREE_BYTES) return false;
    const fault = this.guest.fault.current;
    this.guest.fault.clear();
    try {
      await this.monitor.command("cont");
      return true;
    } catch {
      if (fault) this.guest.fault.raise(fault);
      return false;
    }
  }

  close(): Promise<void> {
    if (this.stopping)
      return this.stopping.then(
        () => undefined,
        () => undefined,
      );
    this.closing ??= (async () => {
      this.monitor.close();
      const pid = this.guest.hostPid;
      await this.guest.close().catch(() => undefined);
      await ensureQemuGone(pid);
      await fsp.rm(this.runtimeDir, { recursive: true, force: true }).catch(() => undefined);
      await this.run.discard();
    })();
    return this.closing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
