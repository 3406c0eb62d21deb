// Shared helpers of the real-VM suites: the guest test image from the jest globalSetup, small VM
// options, a logger that keeps its lines, QEMU processes of a directory, shell in the guest.
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { runInGuest, type RunningVm, type StartVmOptions, type VmLogger } from "../../src/index.js";

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

/**
 * A `dns.lookup` stand-in for tests that put it in place of Node's (Gondolin resolves allowed
 * hosts with it): `names` resolve to 127.0.0.1, IP literals to themselves, anything else is
 * ENOTFOUND. Every name asked is appended to `asked`.
 */
export function loopbackLookup(names: ReadonlySet<string>, asked: string[] = []) {
  return (hostname: string, options: unknown, callback?: (...args: unknown[]) => void): void => {
    const done = (typeof options === "function" ? options : callback) as (...args: unknown[]) => void;
    const all = typeof options === "object" && options !== null && (options as { all?: boolean }).all === true;
    asked.push(hostname);
    const address = net.isIP(hostname) ? hostname : names.has(hostname) ? "127.0.0.1" : undefined;
    if (!address) {
      process.nextTick(done, Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: "ENOTFOUND" }));
      return;
    }
    if (all) process.nextTick(done, null, [{ address, family: 4 }]);
    else process.nextTick(done, null, address, 4);
  };
}
