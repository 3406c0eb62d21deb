// The host's facts (CPUs, memory, KVM access), the accelerator choice (KVM proven by a guest
// kernel, else TCG) and resource checks, which `@pi-sandbox/vm/host` (src/host.ts) hands out.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { VmError } from "../errors.js";
import {
  KvmVerdictCache,
  fileIdentity,
  hostBootId,
  probeKvmKernel,
  type KvmVerdict,
  type KvmVerdictKey,
} from "./kvm-probe.js";

/** QEMU accelerator names this package chooses between. */
export type Accelerator = "kvm" | "hvf" | "tcg";

/** What the host offers, read at call time (inject a fixed value in tests). */
export interface HostFacts {
  /** `process.platform`. */
  platform: NodeJS.Platform;
  /** `process.arch`. */
  arch: string;
  /** CPUs the process may use (`os.availableParallelism()`). */
  cpus: number;
  /** Physical memory in bytes (`os.totalmem()`). */
  memoryBytes: number;
  /** Whether `/dev/kvm` exists and is readable and writable by this process. */
  kvmAccessible: boolean;
  /** Why KVM cannot be used although `/dev/kvm` is accessible (set by {@link resolveAccelerator}). */
  kvmProblem?: string;
  /** Whether a guest kernel has booted on this host's KVM (set by {@link resolveAccelerator}). */
  kvmProven?: boolean;
}

/** The accelerator and the QEMU machine/CPU model that go with it. */
export interface AcceleratorChoice {
  /** Accelerator passed to QEMU (`-accel`). */
  accel: Accelerator;
  /** QEMU machine type (`microvm` with KVM on Linux x86_64, else `q35`/`virt`). */
  machineType: string;
  /** QEMU CPU model (`host` with hardware acceleration, else `max`). */
  cpu: string;
  /** Why this accelerator, in a sentence for `doctor` and `inspect`. */
  reason: string;
  /** Set when the choice is slow or unusual (software emulation); shown once to the user. */
  warning?: string;
}

/** Resources a VM asks for. */
export interface VmResources {
  /** Virtual CPUs (whole number ≥ 1). */
  cpus: number;
  /** Guest memory in GiB (fractions allowed, e.g. 0.5). */
  memoryGiB: number;
}

const GiB = 1024 ** 3;
/** Largest disk this package creates, in GiB (qcow2 allows more; this guards typos). */
export const MAX_DISK_GIB = 16 * 1024;
/** Smallest guest memory QEMU + Gondolin's guest boot with, in GiB. */
export const MIN_MEMORY_GIB = 0.25;

/** Reads the host's facts now. */
export function probeHost(): HostFacts {
  let kvmAccessible = false;
  if (process.platform === "linux") {
    try {
      fs.accessSync("/dev/kvm", fs.constants.R_OK | fs.constants.W_OK);
      kvmAccessible = true;
    } catch {
      kvmAccessible = false;
    }
  }
  return {
    platform: process.platform,
    arch: process.arch,
    cpus: os.availableParallelism(),
    memoryBytes: os.totalmem(),
    kvmAccessible,
  };
}

/** Host arch → the QEMU system emulator's arch suffix. */
export function qemuArchOf(arch: string): "x86_64" | "aarch64" {
  return arch === "arm64" ? "aarch64" : "x86_64";
}

/**
 * Picks the accelerator from what the host has: KVM when `/dev/kvm` is usable, HVF on macOS,
 * else TCG (software emulation, with a warning). `override` (from `PI_SANDBOX_ACCEL`) forces one,
 * but only if the host can honour it.
 */
export function chooseAccelerator(host: HostFacts, override?: string): AcceleratorChoice {
  const forced = override?.trim().toLowerCase() || undefined;
  if (forced !== undefined && forced !== "kvm" && forced !== "hvf" && forced !== "tcg") {
    throw new VmError("VM_RESOURCES_UNSUPPORTED", `accelerator "${override}" is unknown`, {
      hint: "set PI_SANDBOX_ACCEL to kvm, hvf or tcg, or unset it",
      details: { accelerator: override },
    });
  }
  let accel: Accelerator;
  if (forced === "kvm") {
    if (host.platform !== "linux" || !host.kvmAccessible) {
      throw new VmError("VM_RESOURCES_UNSUPPORTED", "KVM was requested but /dev/kvm is not usable by this user", {
        hint: "add the user to the kvm group or unset PI_SANDBOX_ACCEL",
        details: { accelerator: "kvm" },
      });
    }
    accel = "kvm";
  } else if (forced === "hvf") {
    if (host.platform !== "darwin") {
      throw new VmError("VM_RESOURCES_UNSUPPORTED", "HVF is only available on macOS", {
        hint: "unset PI_SANDBOX_ACCEL",
        details: { accelerator: "hvf" },
      });
    }
    accel = "hvf";
  } else if (forced === "tcg") {
    accel = "tcg";
  } else if (host.platform === "linux" && host.kvmAccessible && host.kvmProblem === undefined) {
    accel = "kvm";
  } else if (host.platform === "darwin") {
    accel = "hvf";
  } else {
    accel = "tcg";
  }
  const arm = host.arch === "arm64";
  const machineType = arm ? "virt" : host.platform === "linux" && accel === "kvm" ? "microvm" : "q35";
  const cpu = accel === "tcg" ? "max" : "host";
  const slow = "running on QEMU software emulation (TCG), which is several times slower";
  let reason: string;
  let warning: string | undefined;
  if (accel === "kvm") {
    reason =
      forced === "kvm"
        ? "forced by PI_SANDBOX_ACCEL=kvm"
        : host.kvmProven
          ? "a guest kernel booted on /dev/kvm"
          : "/dev/kvm is accessible (not yet proven by a guest kernel)";
  } else if (accel === "hvf") {
    reason = forced === "hvf" ? "forced by PI_SANDBOX_ACCEL=hvf" : "macOS Hypervisor.framework";
  } else if (forced === "tcg") {
    reason = "forced by PI_SANDBOX_ACCEL=tcg";
    warning = `${slow}, because PI_SANDBOX_ACCEL=tcg`;
  } else if (host.kvmProblem !== undefined) {
    reason = `/dev/kvm is present but could not run a Linux kernel (${host.kvmProblem})`;
    warning = `${reason}: ${slow}`;
  } else {
    reason = "no hardware virtualisation (/dev/kvm is missing or not accessible to this user)";
    warning = `${reason}: ${slow}`;
  }
  const choice: AcceleratorChoice = { accel, machineType, cpu, reason };
  if (warning) choice.warning = warning;
  return choice;
}

/** Refuses resources the host cannot honour. Never reduces a request silently. */
export function checkResources(resources: VmResources, host: HostFacts): void {
  const { cpus, memoryGiB } = resources;
  if (!Number.isInteger(cpus) || cpus < 1) {
    throw new VmError("VM_RESOURCES_UNSUPPORTED", `cpus must be a whole number of at least 1 (got ${cpus})`, {
      details: { cpus },
    });
  }
  if (cpus > host.cpus) {
    throw new VmError("VM_RESOURCES_UNSUPPORTED", `the VM asks for ${cpus} CPUs but this host offers ${host.cpus}`, {
      hint: `lower resources.cpus to at most ${host.cpus}`,
      details: { cpus, hostCpus: host.cpus },
    });
  }
  if (!Number.isFinite(memoryGiB) || memoryGiB < MIN_MEMORY_GIB) {
    throw new VmError("VM_RESOURCES_UNSUPPORTED", `memoryGiB must be at least ${MIN_MEMORY_GIB} (got ${memoryGiB})`, {
      details: { memoryGiB },
    });
  }
  if (memoryGiB * GiB > host.memoryBytes) {
    const hostGiB = Math.floor((host.memoryBytes / GiB) * 10) / 10;
    throw new VmError(
      "VM_RESOURCES_UNSUPPORTED",
      `the VM asks for ${memoryGiB} GiB of memory but this host has ${hostGiB} GiB`,
      { hint: "lower resources.memoryGiB", details: { memoryGiB, hostMemoryBytes: host.memoryBytes } },
    );
  }
}

/** Checks a requested disk size (GiB) against the limits of this package. */
export function checkDiskSize(diskGiB: number): void {
  if (!Number.isFinite(diskGiB) || diskGiB <= 0 || diskGiB > MAX_DISK_GIB) {
    throw new VmError(
      "VM_RESOURCES_UNSUPPORTED",
      `diskGiB must be a number between 0 and ${MAX_DISK_GIB} (got ${diskGiB})`,
      { details: { diskGiB } },
    );
  }
}

/** QEMU's `-m` value for a size in GiB (rounded to whole MiB). */
export function qemuMemory(memoryGiB: number): string {
  return `${Math.round(memoryGiB * 1024)}M`;
}

/** Resolves `name` on `PATH` (or returns an absolute `name` that is executable). */
export function findExecutable(name: string, envPath = process.env.PATH ?? ""): string | undefined {
  const candidates = path.isAbsolute(name)
    ? [name]
    : envPath
        .split(path.delimiter)
        .filter(Boolean)
        .map((dir) => path.join(dir, name));
  for (const candidate of candidates) {
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      if (fs.statSync(candidate).isFile()) return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** Options of {@link resolveAccelerator}. */
export interface ResolveAcceleratorOptions {
  /** The QEMU binary that probes run (the launcher's wrapper is fine). */
  qemuPath: string;
  /** The real emulator binary, for the cache key (default `qemuPath`). */
  emulatorPath?: string;
  /** Host facts (default: probed now). */
  host?: HostFacts;
  /** `PI_SANDBOX_ACCEL`: forces an accelerator, no probe. */
  override?: string;
  /** The guest kernel to prove KVM with; without it only a cached verdict of this host boot counts. */
  kernelPath?: string;
  /** Directory of the verdict cache (a state root); without it every call probes. */
  cacheDir?: string;
  /** Banner deadline of the probe in ms (default 8000). */
  probeTimeoutMs?: number;
}

/** What {@link resolveAccelerator} found. */
export interface ResolvedAccelerator {
  /** The accelerator a boot gets, with its reason. */
  choice: AcceleratorChoice;
  /** The host facts with `kvmProblem`/`kvmProven` filled in. */
  host: HostFacts;
  /** The verdict cache key, when a KVM verdict was looked up (for {@link recordKvmFailure}). */
  kvmKey?: KvmVerdictKey;
  /** The KVM verdict used, when there was one. */
  kvmVerdict?: KvmVerdict;
}

/**
 * The accelerator a boot really gets: like {@link chooseAccelerator}, but an accessible
 * `/dev/kvm` counts only after the guest kernel printed its banner on it (see `kvm-probe.ts`).
 * The verdict is cached per host boot, QEMU binary and kernel, so only the first boot after a
 * host reboot pays for the probe (about 1 s where KVM works, the probe deadline where it does
 * not), and concurrent callers wait for one probe.
 */
export async function resolveAccelerator(options: ResolveAcceleratorOptions): Promise<ResolvedAccelerator> {
  let host = options.host ?? probeHost();
  const override = options.override?.trim() ? options.override : undefined;
  if (!host.kvmAccessible || host.platform !== "linux" || override !== undefined || host.kvmProblem !== undefined) {
    return { choice: chooseAccelerator(host, override), host };
  }
  const machine = chooseAccelerator(host);
  const cache = options.cacheDir ? new KvmVerdictCache(options.cacheDir) : undefined;
  const bootId = hostBootId();
  const qemu = fileIdentity(options.emulatorPath ?? options.qemuPath);
  let key: KvmVerdictKey | undefined;
  let verdict: KvmVerdict | undefined;
  if (options.kernelPath) {
    const kernelPath = options.kernelPath;
    key = { bootId, qemu, kernel: fileIdentity(kernelPath), machine: `${machine.machineType}/${machine.cpu}` };
    const timeoutMs = options.probeTimeoutMs;
    const probe = () =>
      probeKvmKernel({
        qemuPath: options.qemuPath,
        kernelPath,
        machineType: machine.machineType,
        cpu: machine.cpu,
        ...(timeoutMs !== undefined ? { timeoutMs } : {}),
      });
    verdict = cache ? await cache.getOrProbe(key, probe, (timeoutMs ?? 8_000) + 30_000) : await probe();
  } else if (cache) {
    verdict = await cache.anyFor(bootId, qemu);
  }
  if (verdict?.usable === false) host = { ...host, kvmProblem: verdict.problem ?? "unknown problem" };
  else if (verdict?.usable) host = { ...host, kvmProven: true };
  const resolved: ResolvedAccelerator = { choice: chooseAccelerator(host), host };
  if (key) resolved.kvmKey = key;
  if (verdict) resolved.kvmVerdict = verdict;
  return resolved;
}

/**
 * Records that a KVM boot failed although the kernel probe passed (the guest hung later, or QEMU
 * reported a KVM internal error): later boots of this host boot go straight to TCG.
 */
export async function recordKvmFailure(cacheDir: string, key: KvmVerdictKey, problem: string): Promise<void> {
  await new KvmVerdictCache(cacheDir).set(key, {
    usable: false,
    problem,
    at: new Date().toISOString(),
    source: "boot",
  });
}
