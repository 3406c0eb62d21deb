// One boot of an opened disk run on one accelerator: Gondolin's VM options, the QMP monitor, the
// QEMU pid record and the first-boot filesystem growth (its failures typed in start-errors.ts).
// `startVm` (boot.ts) chooses the accelerator and retries; `BootedVm` runs the result.
import { randomBytes } from "node:crypto";
import fsp from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { VM, VMOptions } from "@earendil-works/gondolin";
import { BootedVm } from "./booted-vm.js";
import {
  CONTROL_SOCKET,
  gondolinCertDir,
  FS_SOCKET,
  INCOMING_MARKER,
  INGRESS_SOCKET,
  LONGEST_SOCKET_NAME,
  NET_SOCKET,
  QMP_SOCKET,
  SSH_SOCKET,
  TMP_SOCKET_DIR_PREFIX,
  socketDirsRoot,
} from "../filenames.js";
import type { DiskRun, RunRecovery } from "../disk/disk-store.js";
import { egressPolicy, secretStore } from "../egress/egress-policy.js";
import { VmError } from "../errors.js";
import { runInGuest } from "../guest/exec-util.js";
import { GondolinGuest } from "../guest/gondolin-guest.js";
import type { loadGondolin } from "../gondolin-loader.js";
import { dialMappedTcpOnConnect, seedVfsInodes } from "../gondolin-private.js";
import { GuestFault } from "../guest/guest-fault.js";
import { HostPortProxies, hostPortRoutes } from "../egress/host-port-proxy.js";
import { readonlyMounts } from "./mounts.js";
import { qemuMemory, type Accelerator, type AcceleratorChoice } from "../host/host-facts.js";
import { ensureQemuGone, writeQemuPidRecord, type QemuLauncher } from "../host/qemu-process.js";
import { QmpMonitor } from "../host/qmp.js";
import { createTransferDisk, machineHasTransferDisk } from "../host/transfer-disk.js";
import type { TransferDisk } from "../guest/guest-vm.js";
import { restoreMemory, savedMachineOf, type SuspendState } from "../disk/vm-memory.js";
import { mapStartError, pausedGuestError } from "./start-errors.js";
import type { RestoreOutcome, RunningVm, StartVmOptions } from "./vm-types.js";

const DEFAULT_START_TIMEOUT_MS = 180_000;
// `quiet` saves ~0.8 s of serial output per boot on TCG. The root device is Gondolin's default.
const KERNEL_APPEND = "console=ttyS0 initramfs_async=1 quiet";
const RESIZE_SCRIPT = ["command -v resize2fs >/dev/null 2>&1 || exit 127", "resize2fs /dev/vda 2>&1"].join("\n");
/** Longest unix socket path we allow (the kernel's limit is 107 bytes). */
const MAX_SOCKET_PATH = 100;

/**
 * The guest kernel's command line on `accel`. Under software emulation (TCG) guest processes run
 * without address-space randomisation (`norandmaps`): QEMU 7 keys its translated code by virtual
 * address, so a randomised process start translates its binary and libraries afresh every time.
 * Measured in a TCG guest: boot to first exec 9.2-11.6 s → 6.4-6.9 s, `python3 -c pass` about
 * 0.2 s → 0.1 s, and QEMU's translation cache after boot 284 MiB → 104 MiB of its resident memory.
 * Hardware-accelerated guests run code natively and keep randomisation.
 */
export function kernelAppendFor(accel: Accelerator, extra: readonly string[] = []): string {
  return [KERNEL_APPEND, ...(accel === "tcg" ? ["norandmaps"] : []), ...extra].join(" ");
}

/** One `module.name=value` word: nothing the kernel or the guest's init would split or expand. */
const KERNEL_ARG = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+=[A-Za-z0-9._:-]{1,128}$/;

/** Refuses a kernel argument that is not one plain `module.name=value` word (VM_KERNEL_ARG_INVALID). */
export function checkKernelArgs(args: readonly string[]): void {
  for (const arg of args) {
    if (!KERNEL_ARG.test(arg)) {
      throw new VmError(
        "VM_KERNEL_ARG_INVALID",
        `kernel argument ${JSON.stringify(arg)} is not one module.name=value word`,
        {
          hint: "use a lowercase dotted name and a value of letters, digits and ._:- (at most 128)",
          details: { arg },
        },
      );
    }
  }
}

export function startTimeoutOf(options: StartVmOptions): number {
  return options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS;
}

export interface BootAttempt {
  options: StartVmOptions;
  gondolin: Awaited<ReturnType<typeof loadGondolin>>;
  launcher: Pick<QemuLauncher, "qemuPath" | "emulatorPath" | "devices">;
  started: number;
  warnings: string[];
  /** Resume this saved memory state instead of booting (see vm-memory.ts). */
  memory?: { state: SuspendState; file: string };
  /** What became of a saved memory state, for `RunningVm.restore`. */
  restore?: RestoreOutcome;
  /** What the start's first disk open did with an interrupted run, for `RunningVm.recovery`. */
  recovery?: RunRecovery;
}

/**
 * One boot of an opened disk run on one accelerator. Closes everything and discards the run when
 * it fails. `readyTimeoutMs` bounds the wait for the guest (default: the start timeout).
 */
export async function bootAttempt(
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
  let proxies: HostPortProxies | undefined;
  let policyClose: (() => Promise<void>) | undefined;
  const fault = new GuestFault();
  const cleanup = async () => {
    monitor?.close();
    await proxies?.close();
    await policyClose?.();
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
    monitor = new QmpMonitor(path.join(runtimeDir, QMP_SOCKET), {
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
    const { hostPorts = [], secrets = {} } = options.spec.network;
    const store = secretStore(secrets);
    const onEgress = options.onEgress;
    proxies = await HostPortProxies.open(
      hostPortRoutes(hostPorts, secrets),
      store,
      onEgress && ((use) => onEgress({ kind: "secret", ...use })),
    );
    const policy = egressPolicy(gondolin, {
      allowedHosts: options.spec.network.allowedHosts,
      ...(options.allowedInternalHosts ? { allowedInternalHosts: options.allowedInternalHosts } : {}),
      ...(options.spec.network.hostPorts ? { hostPorts: options.spec.network.hostPorts } : {}),
      store,
      ...(proxies ? { proxies } : {}),
      ...(options.upstream ? { upstream: options.upstream } : {}),
      ...(options.onEgress ? { onEvent: options.onEgress } : {}),
      ...(options.approveEgress ? { approve: options.approveEgress } : {}),
    });
    policyClose = policy.close;
    const mounts = await readonlyMounts(gondolin, options.spec.mounts ?? []);
    // The wrapper starts QEMU with `-incoming defer` and the memory file open when it finds this marker.
    if (attempt.memory)
      await fsp.writeFile(path.join(runtimeDir, INCOMING_MARKER), attempt.memory.file, { mode: 0o600 });
    // Each boot's own fresh drive file, before QEMU starts (the wrapper adds the drive when it is there).
    let transferDisk: TransferDisk | undefined;
    if (machineHasTransferDisk(accelerator.machineType)) transferDisk = await createTransferDisk(runtimeDir);
    const image = run.image;
    const vmOptions: VMOptions = {
      sandbox: {
        // The checked paths, never the directory: given one, Gondolin reads its manifest again
        // at every boot and joins the names there to it unchecked (`../` or a symlink out).
        imagePath: {
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
        append: kernelAppendFor(accelerator.accel, options.kernelArgs),
        console: options.debug ? "stdio" : "none",
        mitmCertDir: gondolinCertDir(options.diskDir),
        virtioSocketPath: path.join(runtimeDir, CONTROL_SOCKET),
        virtioFsSocketPath: path.join(runtimeDir, FS_SOCKET),
        virtioSshSocketPath: path.join(runtimeDir, SSH_SOCKET),
        virtioIngressSocketPath: path.join(runtimeDir, INGRESS_SOCKET),
        netSocketPath: path.join(runtimeDir, NET_SOCKET),
        // Byte counts (counting-fetch.ts); with secrets, substitution under the header rules and
        // scrubbed responses (secret-fetch.ts).
        ...(policy.fetch ? { fetch: policy.fetch as NonNullable<VMOptions["fetch"]> } : {}),
        ...(options.debug ? { debug: ["protocol"] as const } : {}),
      },
      memory: qemuMemory(options.spec.resources.memoryGiB),
      cpus: options.spec.resources.cpus,
      httpHooks: policy.httpHooks,
      env: policy.env,
      ...(mounts ? { vfs: { mounts } } : {}),
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
    const restoreStarted = performance.now();
    try {
      const starting = startWithSignal(vm, signal);
      if (attempt.memory) {
        // Gondolin's readiness check is an exec, answered once the restored guest runs.
        const restoring = resumeMemory(vm, monitor, attempt.memory, readyTimeoutMs);
        starting.catch(() => undefined);
        await fault.race(Promise.all([starting, restoring]));
      } else {
        await fault.race(starting);
      }
    } finally {
      clearInterval(recorder);
    }
    await recorded;
    guest = new GondolinGuest(options.name, vm, fault);
    const pid = vm.getHostPid();
    if (pid !== null && !recorded) await writeQemuPidRecord(options.diskDir, pid);
    let restore = attempt.restore;
    if (attempt.memory) {
      await thawRestoredGuest(guest, signal);
      restore = { warm: true, restoreMs: performance.now() - restoreStarted };
    }
    let grown = run.pointer.grown;
    if (!grown) {
      await growFilesystem(guest, signal);
      grown = true;
    }
    const bootMs = performance.now() - attempt.started;
    logger?.info(
      `[vm ${options.name}] ${attempt.memory ? "resumed from saved memory" : "ready"} in ${Math.round(bootMs)} ms (${accelerator.accel})`,
    );
    const machine = await savedMachineOf(launcher, accelerator, options.spec.resources, run.image);
    return new BootedVm(
      options.name,
      guest,
      monitor,
      run,
      runtimeDir,
      accelerator,
      warnings,
      bootMs,
      grown,
      policy,
      { machine, restore },
      attempt.recovery,
      transferDisk,
    );
  } catch (error) {
    await cleanup();
    if (signal?.aborted) throw signal.reason;
    throw mapStartError(error, options.diskDir, options.name);
  }
}

/** Loads a saved memory state into the QEMU Gondolin started (waiting with `-incoming defer`). */
function resumeMemory(
  vm: VM,
  monitor: QmpMonitor,
  memory: { state: SuspendState; file: string },
  timeoutMs: number,
): Promise<void> {
  return restoreMemory(monitor, timeoutMs, () => {
    // The guest's FUSE mount names files by the inode numbers the old Gondolin handed out.
    if (memory.state.vfs) seedVfsInodes(vm, memory.state.vfs);
  });
}

/** A restored guest: its filesystem was frozen by the suspend, and its clock stood still since. */
async function thawRestoredGuest(guest: GondolinGuest, signal: AbortSignal | undefined): Promise<void> {
  const now = Math.floor(Date.now() / 1000);
  const script = `fsfreeze -u / 2>/dev/null; date -u -s @${now} >/dev/null 2>&1; echo resumed`;
  const result = await runInGuest(guest, ["/bin/sh", "-c", script], signal ? { signal } : {});
  if (!result.stdout.includes("resumed")) {
    throw new VmError("VM_RESTORE_FAILED", `the restored guest did not answer its thaw (exit ${result.exitCode})`, {
      details: { reason: result.stderr.trim().slice(0, 300) },
    });
  }
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
      "the guest image has no resize2fs, which growing the disk to diskGiB needs",
      { hint: "use an image with e2fsprogs", details: { tool: "resize2fs", needs: "disk resize" } },
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
  const preferred = path.join(socketDirsRoot(stateRoot), id);
  let dir: string;
  if (path.join(preferred, LONGEST_SOCKET_NAME).length <= MAX_SOCKET_PATH) {
    await fsp.mkdir(path.dirname(preferred), { recursive: true, mode: 0o700 });
    // Not recursive: an existing directory (or a link in its place) fails with EEXIST, never reused.
    await fsp.mkdir(preferred, { mode: 0o700 });
    dir = preferred;
  } else {
    // Under the shared temp dir: mkdtemp creates a fresh 0700 directory with a random name.
    dir = await fsp.mkdtemp(path.join(os.tmpdir(), TMP_SOCKET_DIR_PREFIX));
  }
  const info = await fsp.lstat(dir);
  const uid = typeof process.getuid === "function" ? process.getuid() : info.uid;
  if (!info.isDirectory() || info.uid !== uid || (info.mode & 0o077) !== 0) {
    throw new VmError(
      "VM_START_FAILED",
      `the VM's socket directory ${dir} is not a private directory of this user (mode ${(info.mode & 0o777).toString(8)}, uid ${info.uid})`,
      {
        hint: "set TMPDIR to a directory only you can write to",
        details: { dir, uid: info.uid, mode: (info.mode & 0o777).toString(8) },
      },
    );
  }
  return dir;
}
