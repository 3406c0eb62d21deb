import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { VmError } from "./errors.js";

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
  /** Why KVM cannot be used although `/dev/kvm` is accessible (set by {@link probeKvm}). */
  kvmProblem?: string;
}

/** The accelerator and the QEMU machine/CPU model that go with it. */
export interface AcceleratorChoice {
  /** Accelerator passed to QEMU (`-accel`). */
  accel: Accelerator;
  /** QEMU machine type (`microvm` with KVM on Linux x86_64, else `q35`/`virt`). */
  machineType: string;
  /** QEMU CPU model (`host` with hardware acceleration, else `max`). */
  cpu: string;
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
    throw new VmError(
      "VM_RESOURCES_UNSUPPORTED",
      `accelerator "${override}" is unknown; set PI_SANDBOX_ACCEL to kvm, hvf or tcg, or unset it`,
      { details: { accelerator: override } },
    );
  }
  let accel: Accelerator;
  if (forced === "kvm") {
    if (host.platform !== "linux" || !host.kvmAccessible) {
      throw new VmError(
        "VM_RESOURCES_UNSUPPORTED",
        "KVM was requested but /dev/kvm is not usable by this user; add the user to the kvm group or unset PI_SANDBOX_ACCEL",
        { details: { accelerator: "kvm" } },
      );
    }
    accel = "kvm";
  } else if (forced === "hvf") {
    if (host.platform !== "darwin") {
      throw new VmError("VM_RESOURCES_UNSUPPORTED", "HVF is only available on macOS; unset PI_SANDBOX_ACCEL", {
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
  const choice: AcceleratorChoice = { accel, machineType, cpu };
  if (accel === "tcg") {
    choice.warning =
      forced === "tcg"
        ? "running on QEMU software emulation (TCG) because PI_SANDBOX_ACCEL=tcg; boots and commands are several times slower"
        : host.kvmProblem !== undefined
          ? `/dev/kvm exists but QEMU cannot use it (${host.kvmProblem}): running on QEMU software emulation (TCG), which is several times slower`
          : "no hardware virtualisation (/dev/kvm is missing or not accessible): running on QEMU software emulation (TCG), which is several times slower";
  }
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
    throw new VmError(
      "VM_RESOURCES_UNSUPPORTED",
      `the VM asks for ${cpus} CPUs but this host offers ${host.cpus}; lower resources.cpus to at most ${host.cpus}`,
      { details: { cpus, hostCpus: host.cpus } },
    );
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
      `the VM asks for ${memoryGiB} GiB of memory but this host has ${hostGiB} GiB; lower resources.memoryGiB`,
      { details: { memoryGiB, hostMemoryBytes: host.memoryBytes } },
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

/**
 * The accelerator a boot would really get: like {@link chooseAccelerator}, but an accessible
 * `/dev/kvm` counts only after {@link probeKvm} ran a paused vCPU on it with `qemuPath`. Returns
 * the choice and the host facts with `kvmProblem` filled in when KVM failed the probe.
 */
export async function resolveAccelerator(
  qemuPath: string,
  host: HostFacts,
  override?: string,
): Promise<{ choice: AcceleratorChoice; host: HostFacts }> {
  if (host.kvmAccessible && host.kvmProblem === undefined && (override ?? "").trim() === "") {
    const problem = await probeKvm(qemuPath, chooseAccelerator(host).machineType);
    if (problem !== undefined) host = { ...host, kvmProblem: problem };
  }
  return { choice: chooseAccelerator(host, override), host };
}

const kvmProbes = new Map<string, Promise<string | undefined>>();

/**
 * Checks that QEMU can really run a vCPU on KVM with the CPU model we would use (`-cpu host`):
 * some nested or sandboxed hosts expose a `/dev/kvm` on which QEMU aborts at vCPU reset ("failed
 * to set MSR"). Starts the emulator paused with QMP on stdio and asks `query-status`: QMP answers
 * commands only from the main loop, after the vCPUs were reset, so an answer proves KVM works
 * (no timing guess), while an exit names the problem. Resolves to the problem (QEMU's error
 * line) or `undefined`. Cached per emulator and machine type for the process.
 */
export function probeKvm(qemuPath: string, machineType: string, timeoutMs = 15_000): Promise<string | undefined> {
  const key = `${qemuPath}\0${machineType}`;
  let probe = kvmProbes.get(key);
  if (!probe) {
    probe = new Promise((resolve) => {
      const args = ["-accel", "kvm", "-machine", machineType, "-cpu", "host", "-m", "64", "-nodefaults"];
      args.push("-display", "none", "-serial", "none", "-S", "-qmp", "stdio");
      const child = spawn(qemuPath, args, { stdio: ["pipe", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      let settled = false;
      const finish = (problem: string | undefined) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        child.kill("SIGKILL");
        resolve(problem);
      };
      const timer = setTimeout(() => finish(`QEMU did not answer within ${timeoutMs} ms`), timeoutMs);
      child.stdin.on("error", () => undefined);
      child.stdin.write('{"execute":"qmp_capabilities"}\n{"execute":"query-status"}\n');
      child.stdout.on("data", (chunk: Buffer) => {
        stdout += chunk.toString();
        if (/"return":\s*\{[^}]*"status"/.test(stdout)) finish(undefined);
      });
      child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
      child.once("error", (error) => finish(error.message));
      child.once("exit", (code, signal) => {
        const lines = stderr.split("\n");
        const line = lines.find((l) => /error|assert|fail/i.test(l)) ?? lines[0] ?? "";
        finish(line.replace(/^qemu-system-\w+: /, "").trim() || `QEMU exited (${signal ?? code})`);
      });
    });
    kvmProbes.set(key, probe);
  }
  return probe;
}
