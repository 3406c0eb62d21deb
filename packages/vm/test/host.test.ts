// What the host can run: KVM, HVF or TCG, chosen and explained (proven, forced, missing); a VM's
// CPUs and memory checked against the host's; executables found on PATH.
import { checkResources, chooseAccelerator, isVmError, type HostFacts } from "../src/index.js";
import { findExecutable, qemuMemory } from "../src/host/host-facts.js";

const GiB = 1024 ** 3;
const linux: HostFacts = { platform: "linux", arch: "x64", cpus: 4, memoryBytes: 8 * GiB, kvmAccessible: true };

describe("chooseAccelerator", () => {
  test("KVM with microvm and the host CPU when /dev/kvm is usable", () => {
    expect(chooseAccelerator(linux)).toMatchObject({ accel: "kvm", machineType: "microvm", cpu: "host" });
  });

  test("TCG with q35 and a warning when /dev/kvm is missing", () => {
    const choice = chooseAccelerator({ ...linux, kvmAccessible: false });
    expect(choice).toMatchObject({ accel: "tcg", machineType: "q35", cpu: "max" });
    expect(choice.warning).toMatch(/software emulation/);
  });

  test("TCG, naming the problem, when /dev/kvm exists but QEMU cannot use it", () => {
    const choice = chooseAccelerator({ ...linux, kvmProblem: "failed to set MSR 0x10a" });
    expect(choice.accel).toBe("tcg");
    expect(choice.warning).toContain("failed to set MSR 0x10a");
    expect(choice.reason).toBe("/dev/kvm is present but could not run a Linux kernel (failed to set MSR 0x10a)");
  });

  test("the reason says why: proven, forced, or missing", () => {
    expect(chooseAccelerator({ ...linux, kvmProven: true }).reason).toBe("a guest kernel booted on /dev/kvm");
    expect(chooseAccelerator(linux).reason).toMatch(/not yet proven/);
    expect(chooseAccelerator(linux, "tcg").reason).toBe("forced by PI_SANDBOX_ACCEL=tcg");
    expect(chooseAccelerator({ ...linux, kvmAccessible: false }).reason).toMatch(/no hardware virtualisation/);
  });

  test("HVF on macOS, virt on arm64", () => {
    expect(chooseAccelerator({ ...linux, platform: "darwin", kvmAccessible: false })).toMatchObject({
      accel: "hvf",
      machineType: "q35",
      cpu: "host",
    });
    expect(chooseAccelerator({ ...linux, platform: "darwin", arch: "arm64", kvmAccessible: false }).machineType).toBe(
      "virt",
    );
  });

  test("an override is honoured only when the host can", () => {
    expect(chooseAccelerator(linux, "tcg")).toMatchObject({ accel: "tcg", machineType: "q35" });
    expect(chooseAccelerator(linux, "kvm").accel).toBe("kvm");
    for (const [host, override] of [
      [{ ...linux, kvmAccessible: false }, "kvm"],
      [linux, "hvf"],
      [linux, "whpx"],
    ] as const) {
      const error = (() => {
        try {
          chooseAccelerator(host, override);
        } catch (e) {
          return e;
        }
      })();
      expect(isVmError(error, "VM_RESOURCES_UNSUPPORTED")).toBe(true);
    }
  });
});

describe("checkResources", () => {
  test("accepts what the host has", () => {
    expect(() => checkResources({ cpus: 4, memoryGiB: 8 }, linux)).not.toThrow();
    expect(() => checkResources({ cpus: 1, memoryGiB: 0.5 }, linux)).not.toThrow();
  });

  test.each([
    [{ cpus: 5, memoryGiB: 1 }, /5 CPUs but this host offers 4/],
    [{ cpus: 0, memoryGiB: 1 }, /at least 1/],
    [{ cpus: 1.5, memoryGiB: 1 }, /whole number/],
    [{ cpus: 1, memoryGiB: 9 }, /9 GiB of memory but this host has 8 GiB/],
    [{ cpus: 1, memoryGiB: 0.1 }, /at least 0.25/],
    [{ cpus: 1, memoryGiB: Number.NaN }, /at least/],
  ])("refuses %j with a typed error, never reducing it", (resources, message) => {
    let error: unknown;
    try {
      checkResources(resources, linux);
    } catch (e) {
      error = e;
    }
    expect(isVmError(error, "VM_RESOURCES_UNSUPPORTED")).toBe(true);
    expect((error as Error).message).toMatch(message);
  });

  test("memory goes to QEMU in whole MiB", () => {
    expect(qemuMemory(1)).toBe("1024M");
    expect(qemuMemory(0.5)).toBe("512M");
  });
});

test("findExecutable looks on PATH and rejects non-executables", async () => {
  expect(findExecutable("sh")).toMatch(/\/sh$/);
  expect(findExecutable("definitely-not-a-tool-xyz")).toBeUndefined();
});
