// VmError and what QEMU's failures become: a typed code and a message without QEMU's noise, with the
// raw text kept in details (a locked image is VM_DISK_BUSY, also from a real qemu-img run).
import { execFileSync } from "node:child_process";
import path from "node:path";
import { QemuImg, VmError, isVmError, mapQemuFailure, mapStartError } from "../src/index.js";
import { tempDir } from "./support/helpers.js";

describe("VmError", () => {
  test("carries code, details and cause, and is recognised across copies by its brand", () => {
    const cause = new Error("raw");
    const error = new VmError("VM_DISK_BUSY", "busy", { cause, details: { dir: "/x" } });
    expect(error).toMatchObject({ name: "VmError", code: "VM_DISK_BUSY", details: { dir: "/x" }, cause });
    expect(isVmError(error)).toBe(true);
    expect(isVmError(error, "VM_DISK_BUSY")).toBe(true);
    expect(isVmError(error, "VM_CLOSED")).toBe(false);
    const foreign = Object.assign(new Error("x"), { code: "VM_DISK_BUSY" });
    expect(isVmError(foreign)).toBe(false);
    Object.defineProperty(foreign, Symbol.for("pi-sandbox.VmError"), { value: true });
    expect(isVmError(foreign)).toBe(true);
  });
});

describe("QEMU failures become typed errors that keep the raw text in details", () => {
  test("QEMU's image lock message is VM_DISK_BUSY", () => {
    const raw =
      'qemu-system-x86_64: -drive file=/d/layer-1.qcow2,format=qcow2,if=none,id=drive0: Failed to get "write" lock\nIs another process using the image [/d/layer-1.qcow2]?';
    const error = mapQemuFailure(raw, { action: "booting", path: "/d/layer-1.qcow2" });
    expect(error.code).toBe("VM_DISK_BUSY");
    expect(error.message).not.toContain("qemu-system");
    expect(error.hint).toBe("stop the VM using it first");
    expect(error.toJSON()).toMatchObject({ name: "VmError", code: "VM_DISK_BUSY", hint: "stop the VM using it first" });
    expect(error.details.qemuOutput).toBe(raw);
    const start = mapStartError(new Error(`sandbox exited (code=1) (qemu: ${raw})`), "/d");
    expect(isVmError(start, "VM_DISK_BUSY")).toBe(true);
  });

  test("a missing file is named", () => {
    const error = mapQemuFailure("qemu-img: x.qcow2: Could not open '/img/rootfs.ext4': No such file or directory", {
      action: "creating a disk layer",
    });
    expect(error.code).toBe("VM_DISK_NOT_FOUND");
    expect(error.message).toContain("/img/rootfs.ext4");
  });

  test("unknown failures are VM_DISK_FAILED with the first line only in the message", () => {
    const error = mapQemuFailure("qemu-img: something odd\nmore lines", { action: "merging" });
    expect(error.code).toBe("VM_DISK_FAILED");
    expect(error.message).toContain("something odd");
    expect(error.message).not.toContain("more lines");
  });

  test("start failures: timeouts, missing QEMU, and the rest", () => {
    const timeout = Object.assign(new Error("vm startup timed out after 10ms while waiting for guest readiness"), {
      code: "vm_start_timeout",
    });
    expect(mapStartError(timeout, "/d")).toMatchObject({ code: "VM_START_TIMEOUT", cause: timeout });
    const enoent = Object.assign(new Error("spawn /usr/bin/qemu-system-x86_64 ENOENT"), { code: "ENOENT" });
    expect(mapStartError(enoent, "/d")).toMatchObject({ code: "VM_QEMU_MISSING" });
    expect(mapStartError(new Error("sandbox exited (code=1)"), "/d")).toMatchObject({
      code: "VM_START_FAILED",
      details: { reason: "sandbox exited (code=1)", diskDir: "/d" },
    });
    const typed = new VmError("VM_IMAGE_MISSING_TOOL", "no resize2fs");
    expect(mapStartError(typed, "/d")).toBe(typed);
  });

  test("a real qemu-img run against a locked image reports VM_DISK_BUSY", async () => {
    const { dir, cleanup } = await tempDir();
    try {
      const file = path.join(dir, "layer.qcow2");
      execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", file, "16M"]);
      // qemu-io holds the write lock while it waits on its stdin.
      const { spawn } = await import("node:child_process");
      const holder = spawn("qemu-io", ["-f", "qcow2", file], { stdio: ["pipe", "ignore", "ignore"] });
      await new Promise((resolve) => setTimeout(resolve, 500));
      try {
        await expect(new QemuImg().commitIntoBacking(file)).rejects.toMatchObject({ code: "VM_DISK_BUSY" });
      } finally {
        holder.stdin.end("quit\n");
        await new Promise((resolve) => holder.once("exit", resolve));
      }
    } finally {
      await cleanup();
    }
  });
});
