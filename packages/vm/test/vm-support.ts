import fs from "node:fs";
import path from "node:path";
import { runInGuest, type RunningVm, type StartVmOptions, type VmLogger } from "../src/index.js";

/** The guest test image directory set by the jest globalSetup (jest.test-image.cjs). */
export function testImage(): string {
  const dir = process.env.PI_SANDBOX_TEST_IMAGE;
  if (!dir || !fs.existsSync(path.join(dir, "rootfs.ext4"))) {
    throw new Error("PI_SANDBOX_TEST_IMAGE is not set: run real-VM tests with jest.vm.config.cjs");
  }
  return dir;
}

/** A logger that keeps lines for assertions and failure output. */
export function memoryLogger(): VmLogger & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    info: (m) => lines.push(`info ${m}`),
    warn: (m) => lines.push(`warn ${m}`),
    debug: (m) => lines.push(`debug ${m}`),
  };
}

/** Start options for a small test VM (1 CPU, 1 GiB: boots fastest under TCG). */
export function vmOptions(
  name: string,
  diskDir: string,
  stateRoot: string,
  extra: Partial<StartVmOptions> & { allowedHosts?: string[] } = {},
): StartVmOptions {
  const { allowedHosts = [], ...rest } = extra;
  return {
    name,
    diskDir,
    stateRoot,
    spec: { resources: { cpus: 1, memoryGiB: 1 }, network: { allowedHosts } },
    startTimeoutMs: 300_000,
    logger: memoryLogger(),
    ...rest,
  };
}

/** Pids of running QEMU processes whose command line mentions `dir`. */
export function qemuProcessesUsing(dir: string): number[] {
  const pids: number[] = [];
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let cmdline: string;
    try {
      cmdline = fs.readFileSync(`/proc/${entry}/cmdline`, "utf8");
    } catch {
      continue;
    }
    if (cmdline.includes("qemu-system") && cmdline.includes(dir)) {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, "utf8");
      if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) continue;
      pids.push(Number(entry));
    }
  }
  return pids;
}

/** Runs a shell script in the guest and returns its stdout; a non-zero exit throws with stderr. */
export async function sh(vm: RunningVm, script: string): Promise<string> {
  const result = await runInGuest(vm, script);
  if (result.exitCode !== 0) throw new Error(`guest command failed (${result.exitCode}): ${script}\n${result.stderr}`);
  return result.stdout;
}
