// Guest images: loading an image directory, checking it is readable, recording and verifying the
// image a disk was made from.
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { VmError, messageOf } from "./errors.js";
import { loadGondolin } from "./gondolin-loader.js";

/** A resolved guest image: Gondolin's three asset files. */
export interface GuestImage {
  /** The assets directory, when all files live in one (then Gondolin also reads its manifest). */
  dir?: string;
  /** Kernel (`vmlinuz-virt`). */
  kernelPath: string;
  /** Initramfs (`initramfs.cpio.lz4`). */
  initrdPath: string;
  /** Root filesystem (`rootfs.ext4`), the immutable base of every disk made from this image. */
  rootfsPath: string;
}

/** An image as recorded in a disk, with what identifies its rootfs at creation time. */
export interface RecordedImage extends GuestImage {
  /** Size of the rootfs file in bytes when the disk was created. */
  rootfsBytes: number;
  /** Modification time of the rootfs file (ms) when the disk was created. */
  rootfsMtimeMs: number;
}

const DEFAULT_FILES = { kernel: "vmlinuz-virt", initramfs: "initramfs.cpio.lz4", rootfs: "rootfs.ext4" };

/** Reads an assets directory (manifest names when present, else Gondolin's default names). */
export async function loadImageDir(dir: string): Promise<GuestImage> {
  if (!path.isAbsolute(dir)) {
    throw new VmError("VM_IMAGE_NOT_FOUND", `the image path ${dir} must be absolute`, { details: { path: dir } });
  }
  let files = DEFAULT_FILES;
  const manifestPath = path.join(dir, "manifest.json");
  try {
    const manifest = JSON.parse(await fsp.readFile(manifestPath, "utf8")) as { assets?: Partial<typeof DEFAULT_FILES> };
    files = { ...DEFAULT_FILES, ...(manifest.assets ?? {}) };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== "ENOENT" && code !== "ENOTDIR") {
      throw new VmError("VM_IMAGE_NOT_FOUND", `the image manifest ${manifestPath} is unreadable: ${messageOf(error)}`, {
        cause: error,
        details: { path: manifestPath },
      });
    }
  }
  const image: GuestImage = {
    dir,
    kernelPath: path.resolve(dir, files.kernel),
    initrdPath: path.resolve(dir, files.initramfs),
    rootfsPath: path.resolve(dir, files.rootfs),
  };
  await assertImageReadable(image);
  return image;
}

/** Fails with VM_IMAGE_NOT_FOUND naming the first missing or unreadable asset file. */
export async function assertImageReadable(image: GuestImage): Promise<void> {
  for (const file of [image.kernelPath, image.initrdPath, image.rootfsPath]) {
    try {
      await fsp.access(file, fs.constants.R_OK);
    } catch (error) {
      throw new VmError("VM_IMAGE_NOT_FOUND", `the guest image file ${file} is missing or unreadable`, {
        hint: "restore the image or point the config's image at a Gondolin assets directory",
        cause: error,
        details: { path: file, image: image.dir },
      });
    }
  }
}

/**
 * Resolves the image to boot: an explicit absolute assets directory, else Gondolin's own lookup
 * (`GONDOLIN_GUEST_DIR`, a `guest/image/out` above the cwd, `GONDOLIN_DEFAULT_IMAGE` in the local
 * image store, and only then a download).
 */
export async function resolveImage(
  image: string | undefined,
  options: { stateRoot?: string } = {},
): Promise<GuestImage> {
  if (image !== undefined) return loadImageDir(image);
  const gondolin = await loadGondolin(options.stateRoot);
  let assets: { kernelPath: string; initrdPath: string; rootfsPath: string };
  try {
    assets = await gondolin.ensureGuestAssets();
  } catch (error) {
    throw new VmError(
      "VM_IMAGE_NOT_FOUND",
      "no guest image is configured and Gondolin's default image is not available",
      {
        hint: "set image: in sandbox.yaml, set GONDOLIN_GUEST_DIR, or import one with `gondolin image import`",
        cause: error,
        details: { reason: messageOf(error) },
      },
    );
  }
  const dirs = new Set([assets.kernelPath, assets.initrdPath, assets.rootfsPath].map((file) => path.dirname(file)));
  const resolved: GuestImage = {
    kernelPath: path.resolve(assets.kernelPath),
    initrdPath: path.resolve(assets.initrdPath),
    rootfsPath: path.resolve(assets.rootfsPath),
  };
  if (dirs.size === 1) resolved.dir = path.resolve([...dirs][0]!);
  await assertImageReadable(resolved);
  return resolved;
}

/** Records an image with the identity of its rootfs file. */
export async function recordImage(image: GuestImage): Promise<RecordedImage> {
  const stat = await fsp.stat(image.rootfsPath);
  return { ...image, rootfsBytes: stat.size, rootfsMtimeMs: Math.trunc(stat.mtimeMs) };
}

/** Fails when a disk's image is gone (VM_IMAGE_NOT_FOUND) or its rootfs changed (VM_IMAGE_CHANGED). */
export async function verifyRecordedImage(image: RecordedImage): Promise<void> {
  await assertImageReadable(image);
  const stat = await fsp.stat(image.rootfsPath);
  if (stat.size !== image.rootfsBytes || Math.trunc(stat.mtimeMs) !== image.rootfsMtimeMs) {
    throw new VmError(
      "VM_IMAGE_CHANGED",
      `the guest image file ${image.rootfsPath} changed since this disk was created from it; the disk only works with the original file`,
      {
        hint: "restore it, or destroy and recreate the instance",
        details: {
          path: image.rootfsPath,
          expected: { bytes: image.rootfsBytes, mtimeMs: image.rootfsMtimeMs },
          actual: { bytes: stat.size, mtimeMs: Math.trunc(stat.mtimeMs) },
        },
      },
    );
  }
}
