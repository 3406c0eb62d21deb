// Guest images: loading an image directory (its files kept inside it, checked against its
// manifest), checking it is readable, recording and verifying the image a disk was made from.
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { VmError, messageOf } from "../errors.js";
import { loadGondolin } from "../gondolin-loader.js";
import {
  ASSET_ROLES,
  assertStandaloneRootfs,
  containedAsset,
  invalidImage,
  readImageManifest,
  realImageDir,
  type AssetRole,
  type ImageManifest,
} from "./image-assets.js";
import { verifyAssetChecksums } from "./image-checksums.js";

/** A resolved guest image: Gondolin's three asset files. */
export interface GuestImage {
  /**
   * The assets directory (its real path), when all files live in one: they are checked to lie
   * inside it. Gondolin gets the three paths, never the directory, which it would read the
   * manifest of again and join the names to unchecked.
   */
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

/** Options of {@link loadImageDir}, {@link resolveImage} and {@link verifyRecordedImage}. */
export interface ImageCheckOptions {
  /**
   * The vm layer's state root: where the checksums already verified are remembered
   * (`imageChecksumsFile`), so only the first use of an image file hashes it. Without one,
   * every check hashes.
   */
  stateRoot?: string;
}

/**
 * Reads an assets directory (manifest names when present, else Gondolin's default names). The
 * directory and every asset are resolved through symlinks, and an asset that ends up outside the
 * directory, a rootfs qcow2 that pulls in another file, or a file that does not match the
 * manifest's sha256 is refused (VM_IMAGE_INVALID): the directory may come from an untrusted
 * repository. Returns the real paths. A manifest without checksums (or no manifest) loads after
 * the other checks: checksums written by the same hand as the files prove no origin.
 */
export async function loadImageDir(dir: string, options: ImageCheckOptions = {}): Promise<GuestImage> {
  if (!path.isAbsolute(dir)) {
    throw new VmError("VM_IMAGE_NOT_FOUND", `the image path ${dir} must be absolute`, { details: { path: dir } });
  }
  const realDir = await realImageDir(dir);
  const manifest = await readImageManifest(realDir);
  return checkAssets(realDir, manifest, manifest.files, options);
}

/**
 * The checks every image gets, on files named relative to `realDir` (a manifest's names) or
 * absolute (a disk's record): each inside the directory, a standalone rootfs, the checksums.
 */
async function checkAssets(
  realDir: string,
  manifest: ImageManifest,
  files: Record<AssetRole, string>,
  options: ImageCheckOptions,
): Promise<GuestImage> {
  const real = {} as Record<AssetRole, string>;
  for (const role of ASSET_ROLES) real[role] = await containedAsset(realDir, role, files[role]);
  await assertStandaloneRootfs(realDir, real.rootfs);
  if (manifest.checksums && manifest.path) {
    const sums = manifest.checksums;
    await verifyAssetChecksums(
      ASSET_ROLES.map((role) => ({ role, path: real[role], expected: sums[role] })),
      { dir: realDir, manifestPath: manifest.path, ...(options.stateRoot ? { stateRoot: options.stateRoot } : {}) },
    );
  }
  return { dir: realDir, kernelPath: real.kernel, initrdPath: real.initramfs, rootfsPath: real.rootfs };
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
export async function resolveImage(image: string | undefined, options: ImageCheckOptions = {}): Promise<GuestImage> {
  if (image !== undefined) return loadImageDir(image, options);
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
  // Gondolin joins its manifest's names to the directory unchecked, and one of its places is a
  // `guest/image/out` above the cwd (a repository's, perhaps): its answer gets our checks too, as
  // the directory it names, and must be the files that directory's manifest names.
  const given = [assets.kernelPath, assets.initrdPath, assets.rootfsPath].map((file) => path.resolve(file));
  const dirs = new Set(given.map((file) => path.dirname(file)));
  const dir = [...dirs][0]!;
  if (dirs.size !== 1) {
    throw invalidImage(
      dir,
      `Gondolin's default image names files in more than one directory (${given.join(", ")}); it is not booted`,
      "set image: in sandbox.yaml to an assets directory that holds all three files",
      { paths: given },
    );
  }
  const loaded = await loadImageDir(dir, options);
  const real = await Promise.all(given.map((file) => fsp.realpath(file).catch(() => file)));
  if (real[0] !== loaded.kernelPath || real[1] !== loaded.initrdPath || real[2] !== loaded.rootfsPath) {
    throw invalidImage(
      dir,
      `Gondolin's default image (${given.join(", ")}) is not what the manifest in ${dir} names; it is not booted`,
      "set image: in sandbox.yaml to an assets directory that holds all three files",
      { paths: given },
    );
  }
  return loaded;
}

/** Records an image with the identity of its rootfs file. */
export async function recordImage(image: GuestImage): Promise<RecordedImage> {
  const stat = await fsp.stat(image.rootfsPath);
  return { ...image, rootfsBytes: stat.size, rootfsMtimeMs: Math.trunc(stat.mtimeMs) };
}

/**
 * Fails when a disk's image is gone (VM_IMAGE_NOT_FOUND), its rootfs changed (VM_IMAGE_CHANGED),
 * or its files no longer pass {@link loadImageDir}'s checks (VM_IMAGE_INVALID): the recorded
 * paths must still lie inside the recorded directory after symlinks, and match the checksums of
 * the manifest there now (cached, so only a changed file is hashed). A record without a
 * directory (files Gondolin found in several places, before such images were refused) gets the
 * first two checks only.
 */
export async function verifyRecordedImage(image: RecordedImage, options: ImageCheckOptions = {}): Promise<void> {
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
  if (image.dir === undefined) return;
  const realDir = await realImageDir(image.dir);
  const files = { kernel: image.kernelPath, initramfs: image.initrdPath, rootfs: image.rootfsPath };
  await checkAssets(realDir, await readImageManifest(realDir), files, options);
}
