// The accelerator a boot really gets, with the real QEMU and the test image's kernel: the KVM
// probe's command line under TCG (microvm), a KVM boot that fails after a passed probe, and the
// guest kernel's command line on the accelerator it got. One boot.
import fsp from "node:fs/promises";
import path from "node:path";
import { DiskStore, probeKvmKernel, resolveAccelerator, startVm, type RunningVm } from "../src/index.js";
import { tempDir } from "./support/helpers.js";
import { sh, testImage, vmOptions } from "./support/vm-support.js";

let root: string;
let cleanup: () => Promise<void>;
const running = new Set<RunningVm>();

beforeAll(async () => ({ dir: root, cleanup } = await tempDir("pisb-accel-")));
afterAll(async () => {
  await Promise.allSettled([...running].map((vm) => vm.close()));
  await cleanup();
});

// q35 is probed through the sandboxed wrapper in confinement.vm.test.ts; microvm here.
test("the probe's command line makes the image's kernel print its banner (microvm, under TCG)", async () => {
  // The same arguments as the KVM probe, on TCG: proves the banner is what a working
  // accelerator shows, so that only KVM itself can make the probe fail.
  const verdict = await probeKvmKernel({
    qemuPath: "qemu-system-x86_64",
    kernelPath: path.join(testImage(), "vmlinuz-virt"),
    machineType: "microvm",
    cpu: "max",
    accel: "tcg",
    timeoutMs: 60_000,
  });
  expect(verdict).toMatchObject({ usable: true });
});

test("a KVM boot that fails after a passed probe is retried once on TCG, later boots skip KVM, and TCG guests run without address randomisation", async () => {
  // The probe's QEMU says KVM works; the boot runs the real QEMU with -accel kvm. Here (no KVM, or
  // a KVM that aborts or hangs) that boot fails and is retried on TCG; where KVM works, it boots.
  const fake = path.join(root, "qemu-banner");
  await fsp.writeFile(fake, `#!/bin/sh\necho x >> '${fake}.calls'\nprintf 'Linux version 6.1.0 (fake)\\r\\n'\n`, {
    mode: 0o755,
  });
  const stateRoot = path.join(root, "state");
  const diskDir = path.join(root, "disk");
  await new DiskStore({ stateRoot }).createDisk(diskDir, { image: testImage(), diskGiB: 2 });
  const progress: string[] = [];
  const previous = process.env.PI_SANDBOX_ACCEL;
  delete process.env.PI_SANDBOX_ACCEL;
  let vm: RunningVm;
  try {
    vm = await startVm(
      vmOptions("accel", diskDir, stateRoot, {
        kvmProbeQemuPath: fake,
        kvmReadyTimeoutMs: 30_000,
        onProgress: (m) => progress.push(m),
      }),
    );
  } finally {
    if (previous !== undefined) process.env.PI_SANDBOX_ACCEL = previous;
  }
  running.add(vm);
  expect(await sh(vm, "echo alive")).toBe("alive\n");
  const kvmWorks = vm.accelerator.accel === "kvm";
  // Address randomisation is off only under TCG, where it makes every process start re-translate.
  expect(await sh(vm, "cat /proc/sys/kernel/randomize_va_space")).toBe(kvmWorks ? "2\n" : "0\n");
  if (kvmWorks) {
    expect(vm.accelerator.reason).toBe("a guest kernel booted on /dev/kvm");
  } else {
    expect(vm.accelerator.accel).toBe("tcg");
    expect(progress).toEqual([
      "checking that KVM can run the guest kernel",
      expect.stringMatching(/^KVM could not run the guest \(.+\); booting on TCG$/),
    ]);
    expect(vm.warnings).toEqual(expect.arrayContaining([progress[1]]));
    expect(vm.accelerator.reason).toMatch(/^\/dev\/kvm is present but could not run a Linux kernel \(/);
    // The verdict was updated: the next boot of this host boot goes to TCG without probing.
    const later = await resolveAccelerator({
      qemuPath: fake,
      host: { platform: "linux", arch: "x64", cpus: 1, memoryBytes: 2 ** 30, kvmAccessible: true },
      kernelPath: path.join(testImage(), "vmlinuz-virt"),
      cacheDir: stateRoot,
    });
    expect(later.choice.accel).toBe("tcg");
  }
  expect((await fsp.readFile(`${fake}.calls`, "utf8")).trim().split("\n")).toHaveLength(1);
  await vm.stop();
  running.delete(vm);
});
