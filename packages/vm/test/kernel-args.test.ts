// Words a caller adds to the guest kernel's command line: appended after the defaults, and refused
// before anything is opened when they are not one plain `module.name=value`.
import os from "node:os";
import path from "node:path";
import { isVmError, startVm } from "../src/index.js";
import { checkKernelArgs, kernelAppendFor } from "../src/boot/boot-attempt.js";

test("the caller's words follow the defaults (and norandmaps under TCG)", () => {
  expect(kernelAppendFor("tcg", ["pi_sandbox.agent=0123abcd"])).toBe(
    "console=ttyS0 initramfs_async=1 quiet norandmaps pi_sandbox.agent=0123abcd",
  );
  expect(kernelAppendFor("kvm")).toBe("console=ttyS0 initramfs_async=1 quiet");
});

test.each([
  "pi_sandbox.agent=x y",
  "pi_sandbox.agent=$(reboot)",
  "init=/bin/sh",
  "pi_sandbox.agent=",
  "Pi.agent=1",
  `pi_sandbox.agent=${"a".repeat(129)}`,
  "pi_sandbox.agent=a\nb",
])("refuses %j", (arg) => {
  expect(() => checkKernelArgs([arg])).toThrow(expect.objectContaining({ code: "VM_KERNEL_ARG_INVALID" }));
});

test("startVm refuses a bad word before it looks for the disk", async () => {
  const root = path.join(os.tmpdir(), "pi-sandbox-kernel-args-missing");
  const error: unknown = await startVm({
    name: "k",
    diskDir: path.join(root, "no-disk"),
    stateRoot: root,
    spec: { resources: { cpus: 1, memoryGiB: 1 }, network: { allowedHosts: [] } },
    kernelArgs: ["init=/bin/sh"],
  }).catch((e: unknown) => e);
  expect(isVmError(error, "VM_KERNEL_ARG_INVALID")).toBe(true);
  expect((error as Error).message).toContain("init=/bin/sh");
});
