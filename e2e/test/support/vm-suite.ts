// Shared pieces of the real-VM suites: the image from globalSetup, short isolated temp dirs,
// and a Gondolin VM booted under TCG with an explicit image and an egress allow-list.
import { execFile } from "node:child_process";
import { access, mkdtemp, rm } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";
import { VM, createHttpHooks } from "@earendil-works/gondolin";
import { testImage } from "@pi-sandbox/controller/testing";

export const execFileAsync = promisify(execFile);

/** The assets directory jest.test-image.cjs put into the environment. */
export { testImage };

/**
 * Accelerator for test VMs. TCG unless PI_SANDBOX_TEST_ACCEL says otherwise: development and CI
 * machines here expose a /dev/kvm that cannot run guests, and Gondolin would pick it.
 */
export function testAccel(): string {
  return process.env.PI_SANDBOX_TEST_ACCEL ?? "tcg";
}

/**
 * A short temporary directory (unix socket paths must stay under 108 bytes) that also becomes
 * TMPDIR and XDG_CACHE_HOME, so Gondolin's sessions, sockets and overlays stay out of the user's.
 */
export async function isolateTempDirs(): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp("/tmp/pse-");
  const saved = { TMPDIR: process.env.TMPDIR, XDG_CACHE_HOME: process.env.XDG_CACHE_HOME };
  process.env.TMPDIR = dir;
  process.env.XDG_CACHE_HOME = path.join(dir, "cache");
  return {
    dir,
    cleanup: async () => {
      for (const [key, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export interface BootOptions {
  /** Persistent root disk (qcow2 overlay); without it Gondolin uses a throw-away overlay. */
  rootDiskPath?: string;
  /** Hosts the guest may reach over HTTP(S); internal addresses need to be listed here too. */
  allowedHosts?: string[];
  allowedInternalHosts?: string[];
}

/** Boot the test image and wait for the first exec; returns the VM and the cold-boot time. */
export async function bootVm(options: BootOptions = {}): Promise<{ vm: VM; bootMs: number }> {
  const { httpHooks, env } = createHttpHooks({
    allowedHosts: options.allowedHosts ?? [],
    allowedInternalHosts: options.allowedInternalHosts ?? [],
  });
  const started = performance.now();
  const vm = await VM.create({
    sandbox: {
      imagePath: testImage(),
      accel: testAccel(),
      console: "none",
      ...(options.rootDiskPath ? { rootDiskPath: options.rootDiskPath, rootDiskFormat: "qcow2" as const } : {}),
    },
    httpHooks,
    env,
  });
  try {
    const first = await vm.exec("true");
    if (first.exitCode !== 0) throw new Error(`first exec in the guest failed: ${first.stderr}`);
  } catch (err) {
    await vm.close();
    throw err;
  }
  return { vm, bootMs: performance.now() - started };
}

/** Debian's headless Chromium (scripts/install-system-deps.sh installs it), or PI_SANDBOX_CHROMIUM. */
export async function chromiumPath(): Promise<string> {
  const candidates = [process.env.PI_SANDBOX_CHROMIUM, "/usr/bin/chromium-headless-shell", "/usr/bin/chromium"];
  for (const candidate of candidates) {
    if (!candidate) continue;
    try {
      await access(candidate);
      return candidate;
    } catch {
      // try the next one
    }
  }
  throw new Error("no Chromium found: run scripts/install-system-deps.sh (or set PI_SANDBOX_CHROMIUM)");
}
