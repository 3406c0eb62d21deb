// Shared helpers of the vm unit tests: temporary directories, a fake image good enough for
// qemu-img, qemu-io and qemu-img probes of a disk chain, a QEMU without seccomp, a port check.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import fsp from "node:fs/promises";
import { connect } from "node:net";
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
  let out: string;
  try {
    out = qemuIo(file, `read -P ${pattern} ${offset} ${length}`, { readOnly: true });
  } catch (error) {
    // qemu-io exits non-zero on a mismatch; anything else is a real failure.
    out = String((error as { stdout?: unknown }).stdout ?? "");
    if (!out.includes("Pattern verification failed")) throw error;
  }
  return !out.includes("Pattern verification failed");
}

/** Scribbles over the layer's first L1 entry: qemu-img check then finds it corrupt. */
export function corruptL1(file: string): void {
  const handle = fs.openSync(file, "r+");
  try {
    const header = Buffer.alloc(48);
    fs.readSync(handle, header, 0, 48, 0);
    const l1Offset = Number(header.readBigUInt64BE(40));
    fs.writeSync(handle, Buffer.alloc(8, 0xff), 0, 8, l1Offset);
  } finally {
    fs.closeSync(handle);
  }
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

/**
 * A directory with a `qemu-system-x86_64` that refuses `-sandbox` the way a QEMU built without
 * seccomp does, and otherwise execs the real QEMU in place: put it first on PATH.
 */
export async function qemuWithoutSeccomp(dir: string): Promise<string> {
  const fakeBin = path.join(dir, "fake-bin");
  await fsp.mkdir(fakeBin);
  const real = execFileSync("sh", ["-c", "command -v qemu-system-x86_64"], { encoding: "utf8" }).trim();
  await fsp.writeFile(
    path.join(fakeBin, "qemu-system-x86_64"),
    [
      "#!/bin/sh",
      'for arg in "$@"; do',
      `  if [ "$arg" = -sandbox ]; then echo "qemu-system-x86_64: -sandbox: There is no option group 'sandbox'" >&2; exit 1; fi`,
      "done",
      `exec '${real}' "$@"`,
      "",
    ].join("\n"),
    { mode: 0o755 },
  );
  return fakeBin;
}

/** Whether a TCP connection to 127.0.0.1:`port` is refused. */
export function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(false);
    });
    socket.once("error", (error: NodeJS.ErrnoException) => resolve(error.code === "ECONNREFUSED"));
  });
}
