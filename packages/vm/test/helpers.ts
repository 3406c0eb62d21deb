import { execFileSync } from "node:child_process";
import fs from "node:fs";
import fsp from "node:fs/promises";
import os from "node:os";
import path from "node:path";

/** A fresh temp directory, removed by the returned cleanup. */
export async function tempDir(prefix = "pisb-vm-"): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), prefix));
  return { dir, cleanup: () => fsp.rm(dir, { recursive: true, force: true }) };
}

/** An image directory good enough for qemu-img (no bootable kernel): sparse raw rootfs of `rootfsMiB`. */
export async function fakeImage(dir: string, rootfsMiB = 64): Promise<string> {
  await fsp.mkdir(dir, { recursive: true });
  await fsp.writeFile(path.join(dir, "vmlinuz-virt"), "kernel");
  await fsp.writeFile(path.join(dir, "initramfs.cpio.lz4"), "initrd");
  const handle = await fsp.open(path.join(dir, "rootfs.ext4"), "w");
  await handle.truncate(rootfsMiB * 1024 * 1024);
  await handle.close();
  return dir;
}

/** Runs qemu-io commands against an image chain (its top file). */
export function qemuIo(file: string, command: string, options: { readOnly?: boolean } = {}): string {
  const args = options.readOnly ? ["-r", "-U"] : [];
  return execFileSync("qemu-io", [...args, "-f", "qcow2", "-c", command, file], { encoding: "utf8" });
}

/** Whether `length` bytes at `offset` of the chain topped by `file` all equal `pattern`. */
export function hasPattern(file: string, offset: number, length: number, pattern: number): boolean {
  const out = qemuIo(file, `read -P ${pattern} ${offset} ${length}`, { readOnly: true });
  return !out.includes("Pattern verification failed");
}

/** The top layer file of a disk directory, from its pointer. */
export function topLayer(diskDir: string): string {
  const pointer = JSON.parse(fs.readFileSync(path.join(diskDir, "disk.json"), "utf8")) as { layers: string[] };
  return path.join(diskDir, pointer.layers.at(-1)!);
}

/** Virtual size of an image, from qemu-img. */
export function virtualSize(file: string): number {
  const info = JSON.parse(execFileSync("qemu-img", ["info", "-U", "--output=json", file], { encoding: "utf8" })) as {
    "virtual-size": number;
  };
  return info["virtual-size"];
}

/** Node flags for a child process that imports this package's TypeScript sources. */
export const TS_NODE_ARGS = [
  "--experimental-transform-types",
  "--no-warnings",
  "--import",
  path.resolve("../../scripts/register-ts.mjs"),
];
