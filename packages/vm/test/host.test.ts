import { spawnSync } from "node:child_process";
import fsp from "node:fs/promises";
import path from "node:path";
import { checkResources, chooseAccelerator, isVmError, probeHost, type HostFacts } from "../src/index.js";
import { findExecutable, probeKvm, qemuMemory } from "../src/host.js";
import { tempDir } from "./helpers.js";

const GiB = 1024 ** 3;
const linux: HostFacts = { platform: "linux", arch: "x64", cpus: 4, memoryBytes: 8 * GiB, kvmAccessible: true };

describe("chooseAccelerator", () => {
  test("KVM with microvm and the host CPU when /dev/kvm is usable", () => {
    expect(chooseAccelerator(linux)).toEqual({ accel: "kvm", machineType: "microvm", cpu: "host" });
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
  });

  test("HVF on macOS, virt on arm64", () => {
    expect(chooseAccelerator({ ...linux, platform: "darwin", kvmAccessible: false })).toEqual({
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

describe("probeKvm", () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeAll(async () => ({ dir, cleanup } = await tempDir()));
  afterAll(async () => cleanup());

  async function fakeQemu(name: string, body: string): Promise<string> {
    const file = path.join(dir, name);
    await fsp.writeFile(file, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
    return file;
  }

  test("a QEMU that aborts at vCPU setup is a problem, named by its error line", async () => {
    const qemu = await fakeQemu(
      "qemu-abort",
      'echo "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69" >&2; exit 134',
    );
    await expect(probeKvm(qemu, "q35")).resolves.toBe("error: failed to set MSR 0x10a to 0x69");
  });

  test("a QEMU that answers query-status (vCPUs reset fine) means KVM is usable", async () => {
    const qemu = await fakeQemu(
      "qemu-ok",
      'echo \'{"QMP": {}}\'; read a; echo \'{"return": {}}\'; read b; echo \'{"return": {"status": "prelaunch", "running": false}}\'; sleep 5',
    );
    await expect(probeKvm(qemu, "q35")).resolves.toBeUndefined();
  });

  test("a QEMU that greets but never answers is not trusted", async () => {
    const qemu = await fakeQemu("qemu-silent", "echo '{\"QMP\": {}}'; exec sleep 5");
    await expect(probeKvm(qemu, "q35", 500)).resolves.toMatch(/did not answer/);
  });

  test("the real QEMU on this host: the probe agrees with an actual KVM start", async () => {
    if (!probeHost().kvmAccessible) return; // nothing to compare without /dev/kvm
    const problem = await probeKvm("qemu-system-x86_64", "q35");
    // Cross-check with QEMU itself: a paused VM with the same CPU model either runs or aborts.
    const direct = spawnSync(
      "qemu-system-x86_64",
      ["-accel", "kvm", "-machine", "q35", "-cpu", "host", "-m", "64", "-nodefaults", "-display", "none", "-S"],
      { timeout: 3000, encoding: "utf8" },
    );
    const aborted = direct.signal !== "SIGTERM";
    expect(problem !== undefined).toBe(aborted);
  });
});

test("findExecutable looks on PATH and rejects non-executables", async () => {
  expect(findExecutable("sh")).toMatch(/\/sh$/);
  expect(findExecutable("definitely-not-a-tool-xyz")).toBeUndefined();
});
