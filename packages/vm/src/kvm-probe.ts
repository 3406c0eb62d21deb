import { spawn } from "node:child_process";

/** Outcome of trying KVM for real. */
export interface KvmProbeResult {
  /** Whether QEMU brought up a KVM vCPU. */
  usable: boolean;
  /** Why not, in QEMU's words (first stderr line), when unusable. */
  reason?: string;
}

const cache = new Map<string, Promise<KvmProbeResult>>();

/**
 * Starts QEMU paused with KVM and asks it to quit over QMP. A readable `/dev/kvm` is not proof
 * that KVM works: nested or restricted hosts expose a device on which QEMU aborts while loading
 * the vCPU's registers (seen here: an assertion in `kvm_buf_set_msrs`). That happens during
 * machine creation, before QMP greets, so a greeting means KVM is usable. Memoised per binary.
 */
export function probeKvm(qemuBinary = "qemu-system-x86_64", timeoutMs = 10_000): Promise<KvmProbeResult> {
  let pending = cache.get(qemuBinary);
  if (!pending) {
    pending = runProbe(qemuBinary, timeoutMs);
    cache.set(qemuBinary, pending);
  }
  return pending;
}

function runProbe(qemuBinary: string, timeoutMs: number): Promise<KvmProbeResult> {
  return new Promise((resolve) => {
    const args = ["-accel", "kvm", "-machine", "q35", "-cpu", "host", "-m", "64", "-nodefaults"];
    args.push("-no-user-config", "-display", "none", "-S", "-serial", "none", "-monitor", "none", "-qmp", "stdio");
    let child;
    try {
      child = spawn(qemuBinary, args, { stdio: ["pipe", "pipe", "pipe"] });
    } catch (error) {
      resolve({ usable: false, reason: (error as Error).message });
      return;
    }
    let stdout = "";
    let stderr = "";
    let settled = false;
    const finish = (result: KvmProbeResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (child.exitCode === null) child.kill("SIGKILL");
      resolve(result);
    };
    const timer = setTimeout(() => finish({ usable: false, reason: `QEMU did not answer within ${timeoutMs} ms` }), timeoutMs);
    child.on("error", (error) => finish({ usable: false, reason: error.message }));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      if (stdout.includes('"QMP"')) {
        child.stdin.write('{"execute":"qmp_capabilities"}\n{"execute":"quit"}\n');
        finish({ usable: true });
      }
    });
    child.on("exit", (code, signal) => {
      const line = stderr.split("\n").find((l) => l.trim() !== "")?.trim();
      finish({ usable: false, reason: line ?? `QEMU exited (${signal ?? code}) before it was ready` });
    });
  });
}
