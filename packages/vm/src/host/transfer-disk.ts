// The transfer disk: a sparse raw file in a VM's run directory that the QEMU wrapper gives the
// guest as a second virtio-blk drive (after Gondolin's devices, so the root disk stays the first).
// Large copies move their bytes through windows of it (the supervisor's disk transfers) instead
// of a TCP stream into the guest. Every boot makes its own fresh file; nothing else reads it.
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";

/** The drive's file name in the run directory (the wrapper looks for exactly this name). */
export const TRANSFER_DISK_FILE = "transfer.raw";
/** The drive's virtio serial, as the guest sees it in `/sys/block/<dev>/serial`. */
export const TRANSFER_DISK_SERIAL = "pisb-transfer";
/** The QEMU drive id (never Gondolin's root drive id, so QMP's root-disk lookups pass it by). */
export const TRANSFER_DISK_ID = "pisb-transfer";
/** The drive's size: fixed, because a saved memory state remembers the capacity the guest saw. */
export const TRANSFER_DISK_BYTES = 64 * 1024 * 1024;

/** Whether the wrapper gives this machine type the drive (q35, pc, virt on PCI; microvm on virtio-mmio). */
export function machineHasTransferDisk(machineType: string): boolean {
  return /^(q35|pc|virt|microvm)/.test(machineType);
}

/**
 * Creates the drive's file in `runtimeDir` before QEMU starts: whatever had the name is removed
 * first, then a new file is made exclusively (never through a link), 0600, sparse, of
 * {@link TRANSFER_DISK_BYTES}. What it returns is the VM's `transferDisk` (guest-vm.ts).
 */
export async function createTransferDisk(
  runtimeDir: string,
): Promise<{ path: string; sizeBytes: number; serial: string }> {
  const file = path.join(runtimeDir, TRANSFER_DISK_FILE);
  await fsp.rm(file, { force: true });
  const { O_RDWR, O_CREAT, O_EXCL, O_NOFOLLOW } = fs.constants;
  const handle = await fsp.open(file, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600);
  try {
    await handle.truncate(TRANSFER_DISK_BYTES);
  } finally {
    await handle.close();
  }
  return { path: file, sizeBytes: TRANSFER_DISK_BYTES, serial: TRANSFER_DISK_SERIAL };
}
