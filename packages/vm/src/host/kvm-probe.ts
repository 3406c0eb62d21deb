// Whether KVM can really run a guest, proven by booting a guest kernel, and the cache of verdicts.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { writeFileAtomic } from "@pi-sandbox/config";
import { kvmVerdictsDir } from "../filenames.js";
import { isAlive, processStartTime, type ProcessIdentity } from "../process-util.js";

/**
 * Whether KVM can really run a guest, decided by booting a real guest kernel on it.
 *
 * Some hosts expose a `/dev/kvm` that QEMU accepts but that cannot run a stock Linux kernel: a
 * nested "PVM" KVM without the vmx/svm CPU flags lets QEMU start, answer QMP and even reset its
 * vCPUs, and then the guest never gets past the kernel's real-mode setup code (the serial console
 * stops after "Probing EDD ... ok"). Others abort at vCPU reset ("failed to set MSR"). The only
 * proof that holds on all of them is the guest kernel's own banner on the serial port, so the
 * probe boots the image's kernel with no disk and no initramfs, and waits for `Linux version`.
 */

/** What the probe found. */
export interface KvmVerdict {
  /** True when the guest kernel printed its banner under KVM. */
  usable: boolean;
  /** Why KVM is not usable, in QEMU's or the guest's own words (set when `usable` is false). */
  problem?: string;
  /** ISO time the verdict was reached. */
  at: string;
  /** How it was reached: the kernel probe, or a KVM boot that failed after a passed probe. */
  source: "probe" | "boot";
}

/** Options of {@link probeKvmKernel}. */
export interface KvmKernelProbeOptions {
  /** The QEMU binary to run (a fake one in tests). */
  qemuPath: string;
  /** The guest kernel to boot (the image's `vmlinuz`). */
  kernelPath: string;
  /** QEMU machine type of a KVM boot (`microvm` on Linux x86_64). */
  machineType: string;
  /** CPU model of a KVM boot (default `host`). */
  cpu?: string;
  /** How long the banner may take, in ms (default 8000; under KVM it takes well under 1 s). */
  timeoutMs?: number;
  /** The accelerator to probe (default `kvm`; `tcg` checks the probe's own command line in tests). */
  accel?: "kvm" | "tcg";
}

const DEFAULT_PROBE_TIMEOUT_MS = 8_000;
const BANNER = /Linux version \d/;

/** Boots `kernelPath` under KVM and resolves with the verdict; never rejects. */
export function probeKvmKernel(options: KvmKernelProbeOptions): Promise<KvmVerdict> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_PROBE_TIMEOUT_MS;
  const machine =
    options.machineType === "microvm" ? "microvm,isa-serial=on,auto-kernel-cmdline=on" : options.machineType;
  const args = ["-accel", options.accel ?? "kvm", "-machine", machine, "-cpu", options.cpu ?? "host", "-m", "256"];
  args.push("-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-no-reboot");
  // No root disk and no initramfs: the kernel prints its banner, fails to mount a root and, with
  // panic=-1 and -no-reboot, QEMU exits. We stop it as soon as the banner is seen anyway.
  args.push("-kernel", options.kernelPath, "-append", "console=ttyS0 panic=-1");
  return new Promise((resolve) => {
    let child: ReturnType<typeof spawn>;
    try {
      child = spawn(options.qemuPath, args, { stdio: ["ignore", "pipe", "pipe"] });
    } catch (error) {
      resolve(failed(`QEMU could not be started: ${(error as Error).message}`));
      return;
    }
    let serial = "";
    let stderr = "";
    let settled = false;
    const finish = (verdict: KvmVerdict) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.kill("SIGKILL");
      resolve(verdict);
    };
    const timer = setTimeout(() => {
      const said = qemuWords(stderr);
      const last = lastSerialLine(serial);
      finish(
        failed(
          `the guest kernel printed nothing within ${(timeoutMs / 1000).toFixed(0)} s` +
            (last ? ` (its boot stopped after "${last}")` : "") +
            (said ? `; QEMU said: ${said}` : "") +
            nestedHint(),
        ),
      );
    }, timeoutMs);
    child.stdout!.on("data", (chunk: Buffer) => {
      serial = (serial + chunk.toString("latin1")).slice(-16_384);
      if (BANNER.test(serial)) finish({ usable: true, at: new Date().toISOString(), source: "probe" });
    });
    child.stderr!.on("data", (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-16_384)));
    child.once("error", (error) => finish(failed(`QEMU could not be started: ${error.message}`)));
    child.once("exit", (code, signal) => {
      // Let the last stdout chunk arrive: a kernel that printed its banner and then exited is fine.
      setImmediate(() => {
        if (BANNER.test(serial)) return finish({ usable: true, at: new Date().toISOString(), source: "probe" });
        const said = qemuWords(stderr);
        finish(
          failed(
            said
              ? `QEMU stopped before the guest kernel printed anything: ${said}`
              : `QEMU exited (${signal ?? `code ${code}`}) before the guest kernel printed anything`,
          ),
        );
      });
    });
  });
}

function failed(problem: string): KvmVerdict {
  return { usable: false, problem, at: new Date().toISOString(), source: "probe" };
}

/** QEMU's most telling stderr line, without its program-name prefix. */
export function qemuWords(stderr: string): string {
  const lines = stderr
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  const line = lines.find((l) => /error|assert|fail|abort/i.test(l)) ?? lines[0] ?? "";
  return line.replace(/^qemu-system-\w+: /, "").slice(0, 300);
}

function lastSerialLine(serial: string): string {
  // Control characters from the guest never reach our messages.
  const lines = serial
    .split(/\r?\n/)
    .map((l) => l.replace(/[\p{Cc}]/gu, "").trim())
    .filter(Boolean);
  return (lines.at(-1) ?? "").slice(0, 120);
}

/** " (no vmx/svm CPU flag: nested virtualisation)" when /proc/cpuinfo says so, else "". */
function nestedHint(): string {
  try {
    const info = fs.readFileSync("/proc/cpuinfo", "utf8");
    return /^flags\s*:.*\b(vmx|svm)\b/m.test(info) ? "" : "; the CPU has no vmx/svm flag (nested virtualisation)";
  } catch {
    return "";
  }
}

// ---- the verdict cache ----------------------------------------------------------------------

/** The inputs a verdict depends on: the host boot, the QEMU binary, the kernel and the machine. */
export interface KvmVerdictKey {
  /** `/proc/sys/kernel/random/boot_id`: a host reboot (new kernel, new KVM module) probes again. */
  bootId: string;
  /** QEMU binary identity (path, size, mtime). */
  qemu: string;
  /** Kernel identity (path, size, mtime). */
  kernel: string;
  /** Machine type and CPU model. */
  machine: string;
}

/** The current host boot's id, or "unknown" off Linux. */
export function hostBootId(): string {
  try {
    return fs.readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
  } catch {
    return "unknown";
  }
}

/** `path:size:mtime` of a file (after symlinks), or the bare path when it cannot be read. */
export function fileIdentity(file: string): string {
  try {
    const real = fs.realpathSync(file);
    const stat = fs.statSync(real);
    return `${real}:${stat.size}:${Math.trunc(stat.mtimeMs)}`;
  } catch {
    return file;
  }
}

interface StoredVerdict extends KvmVerdict {
  key: KvmVerdictKey;
}

/** Where verdicts live: one small JSON file per key under `<dir>/kvm-verdicts/`. */
export class KvmVerdictCache {
  readonly dir: string;

  constructor(stateRoot: string) {
    this.dir = kvmVerdictsDir(stateRoot);
  }

  #file(key: KvmVerdictKey, ext: string): string {
    const digest = createHash("sha256").update(JSON.stringify(key)).digest("hex").slice(0, 24);
    return path.join(this.dir, `${digest}.${ext}`);
  }

  /** The stored verdict for `key`, if any. */
  async get(key: KvmVerdictKey): Promise<KvmVerdict | undefined> {
    try {
      const stored = JSON.parse(await fsp.readFile(this.#file(key, "json"), "utf8")) as StoredVerdict;
      if (JSON.stringify(stored.key) !== JSON.stringify(key) || typeof stored.usable !== "boolean") return undefined;
      const { key: _key, ...verdict } = stored;
      return verdict;
    } catch {
      return undefined;
    }
  }

  /** Stores (or replaces) the verdict for `key`. */
  async set(key: KvmVerdictKey, verdict: KvmVerdict): Promise<void> {
    await fsp.mkdir(this.dir, { recursive: true, mode: 0o700 });
    await writeFileAtomic(this.#file(key, "json"), JSON.stringify({ ...verdict, key } satisfies StoredVerdict));
  }

  /** Any verdict of this host boot for this QEMU, whatever kernel it was reached with (for doctor). */
  async anyFor(bootId: string, qemu: string): Promise<KvmVerdict | undefined> {
    let names: string[];
    try {
      names = await fsp.readdir(this.dir);
    } catch {
      return undefined;
    }
    let found: StoredVerdict | undefined;
    for (const name of names.filter((n) => n.endsWith(".json"))) {
      try {
        const stored = JSON.parse(await fsp.readFile(path.join(this.dir, name), "utf8")) as StoredVerdict;
        if (stored.key?.bootId !== bootId || stored.key?.qemu !== qemu) continue;
        // A failure anywhere is the news: KVM that fails one kernel is not to be trusted.
        if (!found || (found.usable && !stored.usable)) found = stored;
      } catch {
        // a file being replaced; skip it
      }
    }
    if (!found) return undefined;
    const { key: _key, ...verdict } = found;
    return verdict;
  }

  /**
   * The cached verdict, or the result of `probe()` stored for the next caller. Only one process
   * probes per key: the others wait for its verdict (a lock file holds the prober's identity; a
   * dead prober's lock is taken over).
   */
  async getOrProbe(key: KvmVerdictKey, probe: () => Promise<KvmVerdict>, waitMs: number): Promise<KvmVerdict> {
    const cached = await this.get(key);
    if (cached) return cached;
    await fsp.mkdir(this.dir, { recursive: true, mode: 0o700 });
    const lockFile = this.#file(key, "lock");
    const deadline = Date.now() + waitMs;
    for (;;) {
      const lock = await takeLock(lockFile);
      if (lock) {
        try {
          const again = await this.get(key);
          if (again) return again;
          const verdict = await probe();
          await this.set(key, verdict).catch(() => undefined);
          return verdict;
        } finally {
          await fsp.rm(lockFile, { force: true }).catch(() => undefined);
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
      const verdict = await this.get(key);
      if (verdict) return verdict;
      // A prober that takes far longer than a probe can is stuck: probe ourselves, uncached.
      if (Date.now() > deadline) return probe();
    }
  }
}

/** Creates `file` exclusively with our identity; clears a lock whose owner died. */
async function takeLock(file: string): Promise<boolean> {
  const startTime = processStartTime(process.pid);
  const me: ProcessIdentity = startTime ? { pid: process.pid, startTime } : { pid: process.pid };
  try {
    await fsp.writeFile(file, JSON.stringify(me), { flag: "wx", mode: 0o600 });
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") return false;
  }
  try {
    const owner = JSON.parse(await fsp.readFile(file, "utf8")) as ProcessIdentity;
    if (typeof owner.pid === "number" && !isAlive(owner)) await fsp.rm(file, { force: true });
  } catch {
    // Half-written by its owner a moment ago, or left empty by an owner that died right then.
    const stat = await fsp.stat(file).catch(() => undefined);
    if (stat && Date.now() - stat.mtimeMs > 60_000) await fsp.rm(file, { force: true });
  }
  return false;
}
