// A full host disk under an instance: ENOSPC recognised in any of its forms and reported as
// VM_HOST_DISK_FULL naming the file system and what to do; GuestFault failing work until cleared.
import fs from "node:fs";
import path from "node:path";
import { VmError, isVmError, mapQemuFailure, mapStartError } from "../src/index.js";
import { GuestFault } from "../src/guest/guest-fault.js";
import { hostDiskFullError, hostSpaceOf, isNoSpaceError, mountPointOf } from "../src/host/host-disk.js";
import { tempDir } from "./support/helpers.js";

describe("the host file system under a disk", () => {
  test("is found by its mount point, also for a path that does not exist yet", () => {
    expect(mountPointOf("/proc/self/status")).toBe("/proc");
    expect(mountPointOf("/")).toBe("/");
    const root = mountPointOf(process.cwd());
    expect(mountPointOf(path.join(process.cwd(), "no", "such", "dir"))).toBe(root);
    const space = hostSpaceOf(process.cwd())!;
    expect(space.mountPoint).toBe(root);
    expect(space.totalBytes).toBeGreaterThan(0);
    expect(space.freeBytes).toBeLessThanOrEqual(space.totalBytes);
  });

  test("ENOSPC is recognised through causes, codes and QEMU's text", () => {
    const raw = Object.assign(new Error("write failed"), { code: "ENOSPC" });
    expect(isNoSpaceError(raw)).toBe(true);
    expect(isNoSpaceError(new Error("outer", { cause: raw }))).toBe(true);
    expect(isNoSpaceError(new Error("qemu-img: Could not write: No space left on device"))).toBe(true);
    expect(
      isNoSpaceError(new VmError("VM_DISK_FAILED", "x", { details: { qemuOutput: "No space left on device" } })),
    ).toBe(true);
    expect(isNoSpaceError(new Error("EACCES"))).toBe(false);
    expect(isNoSpaceError(undefined)).toBe(false);
  });

  test("VM_HOST_DISK_FULL names the file system, its free space, and what to do", async () => {
    const { dir, cleanup } = await tempDir();
    try {
      const mount = mountPointOf(dir);
      const running = hostDiskFullError({ dir, situation: "running", name: "web" });
      expect(running.code).toBe("VM_HOST_DISK_FULL");
      expect(running.message).toMatch(
        new RegExp(`^the host file system ${mount.replace(/[/.]/g, "\\$&")} is full \\(\\d+\\.\\d (MiB|GiB) free of`),
      );
      expect(running.message).toContain("QEMU paused the VM web on a disk write");
      expect(running.hint).toBe(
        `free space on ${mount}, then stop it (it resumes and saves its work if there is room again) and start it again`,
      );
      expect(running.message).not.toContain("free space on");
      expect(running.details).toMatchObject({ dir, name: "web", mountPoint: mount });
      expect(typeof running.details.freeBytes).toBe("number");
      const stop = hostDiskFullError({ dir, situation: "stop", name: "web" });
      expect(stop.message).toContain("previous checkpoint is still current");
      expect(stop.message).toContain(`the host file system ${mount} ran out of space`);
      expect(stop.hint).toBe(`free space on ${mount}, then start it again`);
      const disk = hostDiskFullError({ dir, situation: "disk", action: "creating a disk layer" });
      expect(disk.message).toContain(`creating a disk layer in ${dir} failed`);
      expect(disk.hint).toBe(`free space on ${mount} and retry`);
    } finally {
      await cleanup();
    }
  });

  test("qemu-img and start failures on a full file system become VM_HOST_DISK_FULL", () => {
    const file = path.join(fs.realpathSync(process.cwd()), "layer-1.qcow2");
    const error = mapQemuFailure(`qemu-img: ${file}: Could not resize file: No space left on device`, {
      action: "creating a disk layer",
      path: file,
    });
    expect(error.code).toBe("VM_HOST_DISK_FULL");
    expect(error.details).toMatchObject({ dir: path.dirname(file), qemuOutput: expect.stringContaining("No space") });
    const start = mapStartError(
      Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" }),
      "/d",
      "web",
    );
    expect(isVmError(start, "VM_HOST_DISK_FULL")).toBe(true);
    expect((start as VmError).message).toContain("starting the VM web needs some space");
  });
});

describe("GuestFault", () => {
  test("rejects work in flight and new work with the raised error until cleared", async () => {
    const fault = new GuestFault();
    await expect(fault.race(Promise.resolve(1))).resolves.toBe(1);
    await expect(fault.race(Promise.reject(new Error("own")))).rejects.toThrow("own");
    const pending = fault.race(new Promise(() => undefined));
    const error = new VmError("VM_HOST_DISK_FULL", "full");
    expect(fault.raise(error)).toBe(true);
    expect(fault.raise(new VmError("VM_CLOSED", "other"))).toBe(false);
    await expect(pending).rejects.toBe(error);
    await expect(fault.race(Promise.resolve(2))).rejects.toBe(error);
    expect(fault.current).toBe(error);
    fault.clear();
    expect(fault.current).toBeUndefined();
    await expect(fault.race(Promise.resolve(3))).resolves.toBe(3);
  });

  test("tells listeners of a raised fault once, and at once when one is raised already", () => {
    const fault = new GuestFault();
    const heard: string[] = [];
    const off = fault.onRaise((error) => heard.push(`a ${error.code}`));
    fault.onRaise((error) => heard.push(`b ${error.code}`))();
    fault.raise(new VmError("VM_HOST_DISK_FULL", "full"));
    fault.raise(new VmError("VM_CLOSED", "other"));
    off();
    fault.onRaise((error) => heard.push(`c ${error.code}`));
    expect(heard).toEqual(["a VM_HOST_DISK_FULL", "c VM_HOST_DISK_FULL"]);
  });
});
