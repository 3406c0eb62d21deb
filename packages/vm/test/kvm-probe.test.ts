// Each host shape seen in the wild, played by a fake QEMU: a shell script that records how it was
// called and then behaves like QEMU did on that host.
import fsp from "node:fs/promises";
import path from "node:path";
import { KvmVerdictCache, probeKvmKernel, recordKvmFailure, resolveAccelerator, type HostFacts } from "../src/index.js";
import { tempDir } from "./support/helpers.js";

const GiB = 1024 ** 3;
const kvmHost: HostFacts = { platform: "linux", arch: "x64", cpus: 2, memoryBytes: 8 * GiB, kvmAccessible: true };

const SHAPES = {
  // Nested PVM: QEMU runs, the real-mode stub prints, then the guest hangs at ~90 % CPU.
  pvm: `printf 'Probing EDD (edd=off to disable)... ok\\r\\n'; exec sleep 30`,
  // QEMU aborts at vCPU reset.
  abort: `echo "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69" >&2; echo "qemu-system-x86_64: ../target/i386/kvm/kvm.c:3080: kvm_buf_set_msrs: Assertion failed." >&2; kill -ABRT $$`,
  // KVM stops the vCPU with an internal error: QEMU says so on stderr and stays up, the guest silent.
  internal: `echo "KVM internal error. Suberror: 1" >&2; echo "emulation failure" >&2; exec sleep 30`,
  // QEMU gives up at once (no module, no permission).
  exits: `exit 1`,
  // KVM works: the banner comes, then the kernel panics for want of a root and QEMU exits.
  works: `printf 'Linux version 6.1.0-41-amd64 (debian-kernel@lists.debian.org)\\r\\n'; sleep 0.2; printf 'Kernel panic - not syncing: VFS: Unable to mount root fs\\r\\n'`,
} as const;

let dir: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir, cleanup } = await tempDir("pisb-kvm-")));
afterAll(async () => cleanup());

/** A fake QEMU of one shape; every run appends its argv to `<name>.calls`. */
async function fakeQemu(name: string, body: string): Promise<{ path: string; calls: () => Promise<string[]> }> {
  const file = path.join(dir, name);
  const calls = path.join(dir, `${name}.calls`);
  await fsp.writeFile(file, `#!/bin/sh\necho "$*" >> '${calls}'\n${body}\n`, { mode: 0o755 });
  return {
    path: file,
    calls: async () => (await fsp.readFile(calls, "utf8").catch(() => "")).split("\n").filter(Boolean),
  };
}

async function kernel(name = "vmlinuz"): Promise<string> {
  const file = path.join(dir, name);
  await fsp.writeFile(file, `kernel ${name}`);
  return file;
}

describe("probeKvmKernel: a guest kernel's banner is the only proof", () => {
  test("a host whose QEMU runs but whose guest never prints its banner (nested PVM) is refused", async () => {
    const qemu = await fakeQemu("qemu-pvm", SHAPES.pvm);
    const started = Date.now();
    const verdict = await probeKvmKernel({
      qemuPath: qemu.path,
      kernelPath: await kernel(),
      machineType: "microvm",
      timeoutMs: 1500,
    });
    expect(verdict.usable).toBe(false);
    expect(verdict.problem).toMatch(/printed nothing within 2 s/);
    expect(verdict.problem).toContain('stopped after "Probing EDD (edd=off to disable)... ok"');
    expect(Date.now() - started).toBeLessThan(5000);
    const [call] = await qemu.calls();
    expect(call).toContain("-accel kvm");
    expect(call).toContain("-machine microvm,isa-serial=on");
    expect(call).toContain("-cpu host");
    expect(call).toContain(`-kernel ${path.join(dir, "vmlinuz")}`);
    expect(call).toContain("-no-reboot");
  });

  test("an abort at vCPU reset is refused in QEMU's own words", async () => {
    const qemu = await fakeQemu("qemu-abort", SHAPES.abort);
    const verdict = await probeKvmKernel({ qemuPath: qemu.path, kernelPath: await kernel(), machineType: "q35" });
    expect(verdict).toMatchObject({ usable: false });
    expect(verdict.problem).toContain("error: failed to set MSR 0x10a to 0x69");
  });

  test("a KVM internal error with a silent guest is refused in QEMU's own words", async () => {
    const qemu = await fakeQemu("qemu-internal", SHAPES.internal);
    const verdict = await probeKvmKernel({
      qemuPath: qemu.path,
      kernelPath: await kernel(),
      machineType: "microvm",
      timeoutMs: 1000,
    });
    expect(verdict.usable).toBe(false);
    expect(verdict.problem).toMatch(
      /^the guest kernel printed nothing within 1 s; QEMU said: KVM internal error\. Suberror: 1/,
    );
  });

  test("a QEMU that exits without a word is refused with its exit", async () => {
    const qemu = await fakeQemu("qemu-exits", SHAPES.exits);
    const verdict = await probeKvmKernel({ qemuPath: qemu.path, kernelPath: await kernel(), machineType: "q35" });
    expect(verdict.usable).toBe(false);
    expect(verdict.problem).toMatch(/QEMU exited \(code 1\) before the guest kernel printed anything/);
  });

  test("a missing QEMU binary is a problem, not a crash", async () => {
    const verdict = await probeKvmKernel({
      qemuPath: path.join(dir, "no-such-qemu"),
      kernelPath: await kernel(),
      machineType: "q35",
    });
    expect(verdict.usable).toBe(false);
    expect(verdict.problem).toMatch(/ENOENT/);
  });

  test("a banner on the serial port proves KVM", async () => {
    const qemu = await fakeQemu("qemu-works", SHAPES.works);
    const verdict = await probeKvmKernel({ qemuPath: qemu.path, kernelPath: await kernel(), machineType: "microvm" });
    expect(verdict).toMatchObject({ usable: true, source: "probe" });
  });
});

describe("resolveAccelerator: probe once per host boot, QEMU and kernel", () => {
  test("a host like the nested-PVM one gets TCG with the reason, and the verdict is reused", async () => {
    const qemu = await fakeQemu("qemu-pvm-cached", SHAPES.pvm);
    const cacheDir = path.join(dir, "state-pvm");
    const options = { qemuPath: qemu.path, host: kvmHost, kernelPath: await kernel(), cacheDir, probeTimeoutMs: 1000 };
    const first = await resolveAccelerator(options);
    expect(first.choice).toMatchObject({ accel: "tcg", machineType: "q35", cpu: "max" });
    expect(first.choice.reason).toMatch(
      /^\/dev\/kvm is present but could not run a Linux kernel \(the guest kernel printed nothing/,
    );
    expect(first.choice.warning).toMatch(/software emulation \(TCG\)/);
    const second = await resolveAccelerator(options);
    expect(second.choice.reason).toBe(first.choice.reason);
    expect(await qemu.calls()).toHaveLength(1);
  });

  test("a cached 'KVM unusable' is reused until QEMU changes; a verdict of another host boot is never used", async () => {
    const qemu = await fakeQemu("qemu-abort-upgraded", SHAPES.abort);
    const cacheDir = path.join(dir, "state-upgraded");
    const options = { qemuPath: qemu.path, host: kvmHost, kernelPath: await kernel(), cacheDir, probeTimeoutMs: 1000 };
    const first = await resolveAccelerator(options);
    expect(first.choice.accel).toBe("tcg");
    expect((await resolveAccelerator(options)).choice.reason).toBe(first.choice.reason);
    expect(await qemu.calls()).toHaveLength(1);
    // The key holds this boot's id: after a reboot the stored verdict is not found.
    const cache = new KvmVerdictCache(cacheDir);
    expect(await cache.get(first.kvmKey!)).toMatchObject({ usable: false });
    expect(await cache.get({ ...first.kvmKey!, bootId: "another-boot" })).toBeUndefined();
    // A new QEMU (another size) is probed again, and here it works.
    await fakeQemu("qemu-abort-upgraded", `: upgraded; ${SHAPES.works}`);
    expect((await resolveAccelerator(options)).choice.accel).toBe("kvm");
    expect(await qemu.calls()).toHaveLength(2);
  });

  test("concurrent callers (several daemons starting at once) wait for one probe", async () => {
    const qemu = await fakeQemu("qemu-works-concurrent", `sleep 0.5; ${SHAPES.works}`);
    const cacheDir = path.join(dir, "state-concurrent");
    const kernelPath = await kernel();
    const results = await Promise.all(
      [1, 2, 3, 4].map(() => resolveAccelerator({ qemuPath: qemu.path, host: kvmHost, kernelPath, cacheDir })),
    );
    for (const r of results)
      expect(r.choice).toMatchObject({ accel: "kvm", reason: "a guest kernel booted on /dev/kvm" });
    expect(await qemu.calls()).toHaveLength(1);
  });

  test("another kernel is probed again; an override and a host without /dev/kvm never probe", async () => {
    const qemu = await fakeQemu("qemu-works-kernels", SHAPES.works);
    const cacheDir = path.join(dir, "state-kernels");
    await resolveAccelerator({ qemuPath: qemu.path, host: kvmHost, kernelPath: await kernel("k1"), cacheDir });
    await resolveAccelerator({ qemuPath: qemu.path, host: kvmHost, kernelPath: await kernel("k2"), cacheDir });
    expect(await qemu.calls()).toHaveLength(2);
    const forced = await resolveAccelerator({
      qemuPath: qemu.path,
      host: kvmHost,
      override: "tcg",
      kernelPath: await kernel("k3"),
      cacheDir,
    });
    expect(forced.choice).toMatchObject({ accel: "tcg", reason: "forced by PI_SANDBOX_ACCEL=tcg" });
    const noKvm = await resolveAccelerator({
      qemuPath: qemu.path,
      host: { ...kvmHost, kvmAccessible: false },
      kernelPath: await kernel("k4"),
      cacheDir,
    });
    expect(noKvm.choice.accel).toBe("tcg");
    expect(await qemu.calls()).toHaveLength(2);
  });

  test("a failed KVM boot after a passed probe turns later boots to TCG", async () => {
    const qemu = await fakeQemu("qemu-works-then-fails", SHAPES.works);
    const cacheDir = path.join(dir, "state-boot-failure");
    const options = { qemuPath: qemu.path, host: kvmHost, kernelPath: await kernel(), cacheDir };
    const first = await resolveAccelerator(options);
    expect(first.choice.accel).toBe("kvm");
    await recordKvmFailure(cacheDir, first.kvmKey!, "the guest showed no sign of life within 45 s");
    const later = await resolveAccelerator(options);
    expect(later.choice.accel).toBe("tcg");
    expect(later.choice.reason).toContain("the guest showed no sign of life within 45 s");
    expect(await qemu.calls()).toHaveLength(1);
  });

  test("without a kernel (doctor with no config) only a cached verdict of this host boot counts", async () => {
    const qemu = await fakeQemu("qemu-pvm-doctor", SHAPES.pvm);
    const cacheDir = path.join(dir, "state-doctor");
    const before = await resolveAccelerator({ qemuPath: qemu.path, host: kvmHost, cacheDir });
    expect(before.choice).toMatchObject({ accel: "kvm" });
    expect(before.choice.reason).toMatch(/not yet proven/);
    await resolveAccelerator({
      qemuPath: qemu.path,
      host: kvmHost,
      kernelPath: await kernel(),
      cacheDir,
      probeTimeoutMs: 500,
    });
    const after = await resolveAccelerator({ qemuPath: qemu.path, host: kvmHost, cacheDir });
    expect(after.choice.accel).toBe("tcg");
    expect(await qemu.calls()).toHaveLength(1);
  });

  test("a lock left by a dead prober does not block the next one", async () => {
    const qemu = await fakeQemu("qemu-works-stale-lock", SHAPES.works);
    const cacheDir = path.join(dir, "state-stale");
    const kernelPath = await kernel();
    // Find the lock's name by letting one probe run, then plant a dead owner's lock there.
    const first = await resolveAccelerator({ qemuPath: qemu.path, host: kvmHost, kernelPath, cacheDir });
    const verdicts = path.join(cacheDir, "kvm-verdicts");
    const [json] = (await fsp.readdir(verdicts)).filter((n) => n.endsWith(".json"));
    await fsp.rm(path.join(verdicts, json!));
    await fsp.writeFile(path.join(verdicts, json!.replace(/\.json$/, ".lock")), JSON.stringify({ pid: 2 ** 22 + 1 }));
    const again = await resolveAccelerator({ qemuPath: qemu.path, host: kvmHost, kernelPath, cacheDir });
    expect(again.choice.accel).toBe(first.choice.accel);
    expect(await qemu.calls()).toHaveLength(2);
  });
});
