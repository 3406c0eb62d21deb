// What keeps a guest image's boot files inside its directory: the manifest read without trusting
// it, each asset resolved through symlinks and refused outside the directory, and a rootfs that
// would pull in another host file (a qcow2 backing or external data file) refused.
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { VmError, messageOf } from "../errors.js";

/** The three files of a Gondolin image, by their manifest keys. */
export type AssetRole = "kernel" | "initramfs" | "rootfs";

/** Every {@link AssetRole}, in the order they are checked and reported. */
export const ASSET_ROLES: readonly AssetRole[] = ["kernel", "initramfs", "rootfs"];

/** Gondolin's file names when a directory has no manifest, or its manifest leaves a role out. */
export const DEFAULT_ASSET_FILES: Readonly<Record<AssetRole, string>> = {
  kernel: "vmlinuz-virt",
  initramfs: "initramfs.cpio.lz4",
  rootfs: "rootfs.ext4",
};

/** The name of an image's manifest in its directory (Gondolin's). */
export const MANIFEST_FILE = "manifest.json";

/** What an image directory's manifest says, checked for shape but not yet for the files. */
export interface ImageManifest {
  /** The manifest's real path, or undefined when the directory has none. */
  path?: string;
  /** Each role's file name as written (relative to the directory), defaults filled in. */
  files: Record<AssetRole, string>;
  /** Each role's sha256 (lowercase hex), when the manifest carries `checksums`. */
  checksums?: Record<AssetRole, string>;
}

const SHA256_HEX = /^[0-9a-f]{64}$/i;

/** An image that is present but may not be booted: VM_IMAGE_INVALID with what is wrong. */
export function invalidImage(
  dir: string,
  message: string,
  hint: string,
  details: Record<string, unknown> = {},
): VmError {
  return new VmError("VM_IMAGE_INVALID", message, { hint, details: { image: dir, ...details } });
}

const OUTSIDE_HINT =
  "keep the image's kernel, initramfs and rootfs as plain files inside its directory (no ../ in manifest.json, no symlink leading out of it), or point image: at an image you built (`pi-sandbox image build`)";

function notFound(file: string, dir: string, cause: unknown): VmError {
  return new VmError("VM_IMAGE_NOT_FOUND", `the guest image file ${file} is missing or unreadable`, {
    hint: "restore the image or point the config's image at a Gondolin assets directory",
    cause,
    details: { path: file, image: dir },
  });
}

/** Whether `real` is strictly below `realDir` (both already resolved through symlinks). */
function isInside(realDir: string, real: string): boolean {
  const relative = path.relative(realDir, real);
  return relative !== "" && relative !== ".." && !relative.startsWith(`..${path.sep}`) && !path.isAbsolute(relative);
}

/** The image directory through its symlinks; VM_IMAGE_NOT_FOUND when it is not a directory. */
export async function realImageDir(dir: string): Promise<string> {
  try {
    const real = await fsp.realpath(dir);
    if ((await fsp.stat(real)).isDirectory()) return real;
  } catch (error) {
    throw new VmError("VM_IMAGE_NOT_FOUND", `the guest image directory ${dir} does not exist or is unreadable`, {
      hint: "restore the image or point the config's image at a Gondolin assets directory",
      cause: error,
      details: { path: dir, image: dir },
    });
  }
  throw new VmError("VM_IMAGE_NOT_FOUND", `the guest image path ${dir} is not a directory`, {
    hint: "point the config's image at a Gondolin assets directory (kernel, initramfs, rootfs and manifest.json)",
    details: { path: dir, image: dir },
  });
}

/**
 * Reads `<realDir>/manifest.json` (none: Gondolin's default names, no checksums). The manifest
 * must itself lie inside the directory, and a parse error is reported without the parser's text:
 * both would otherwise let a manifest symlinked at a host file echo its first bytes in an error.
 */
export async function readImageManifest(realDir: string): Promise<ImageManifest> {
  const candidate = path.join(realDir, MANIFEST_FILE);
  let real: string;
  try {
    real = await fsp.realpath(candidate);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return { files: { ...DEFAULT_ASSET_FILES } };
    throw new VmError("VM_IMAGE_NOT_FOUND", `the image manifest ${candidate} is unreadable: ${messageOf(error)}`, {
      cause: error,
      details: { path: candidate, image: realDir },
    });
  }
  if (!isInside(realDir, real)) {
    throw invalidImage(
      realDir,
      `the image manifest ${candidate} resolves to ${real}, outside the image directory`,
      OUTSIDE_HINT,
      {
        role: "manifest",
        path: real,
      },
    );
  }
  let raw: unknown;
  try {
    raw = JSON.parse(await fsp.readFile(real, "utf8"));
  } catch (error) {
    if (error instanceof SyntaxError) {
      throw invalidImage(realDir, `the image manifest ${real} is not valid JSON`, "restore the image's manifest.json", {
        path: real,
      });
    }
    throw new VmError("VM_IMAGE_NOT_FOUND", `the image manifest ${real} is unreadable: ${messageOf(error)}`, {
      cause: error,
      details: { path: real, image: realDir },
    });
  }
  const malformed = (problem: string): VmError =>
    invalidImage(realDir, `the image manifest ${real} is malformed: ${problem}`, "restore the image's manifest.json", {
      path: real,
      problem,
    });
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw malformed("it is not a JSON object");
  const { assets, checksums } = raw as { assets?: unknown; checksums?: unknown };
  const files = { ...DEFAULT_ASSET_FILES };
  if (assets !== undefined) {
    if (typeof assets !== "object" || assets === null) throw malformed("assets is not an object");
    for (const role of ASSET_ROLES) {
      const file = (assets as Record<string, unknown>)[role];
      if (file === undefined) continue;
      if (typeof file !== "string" || file === "" || file.includes("\0")) {
        throw malformed(`assets.${role} is not a file name`);
      }
      files[role] = file;
    }
  }
  const manifest: ImageManifest = { path: real, files };
  if (checksums !== undefined) {
    if (typeof checksums !== "object" || checksums === null) throw malformed("checksums is not an object");
    const sums = {} as Record<AssetRole, string>;
    for (const role of ASSET_ROLES) {
      const sum = (checksums as Record<string, unknown>)[role];
      if (typeof sum !== "string" || !SHA256_HEX.test(sum)) throw malformed(`checksums.${role} is not a sha256`);
      sums[role] = sum.toLowerCase();
    }
    manifest.checksums = sums;
  }
  return manifest;
}

/**
 * The real path of one asset (`file` relative to `realDir`, or absolute as recorded in a disk),
 * refused with VM_IMAGE_INVALID unless it is a regular file inside the image directory after
 * every symlink. A missing or unreadable file is VM_IMAGE_NOT_FOUND naming `file` as given.
 */
export async function containedAsset(realDir: string, role: AssetRole, file: string): Promise<string> {
  const candidate = path.resolve(realDir, file);
  let real: string;
  try {
    real = await fsp.realpath(candidate);
  } catch (error) {
    throw notFound(candidate, realDir, error);
  }
  if (!isInside(realDir, real)) {
    throw invalidImage(
      realDir,
      `the image ${realDir} names ${file} as its ${role}, which resolves to ${real}, outside the image directory; it is not booted`,
      OUTSIDE_HINT,
      { role, path: real, named: file },
    );
  }
  let stat: fs.Stats;
  try {
    stat = await fsp.stat(real);
    await fsp.access(real, fs.constants.R_OK);
  } catch (error) {
    throw notFound(candidate, realDir, error);
  }
  if (!stat.isFile()) {
    throw invalidImage(realDir, `the image's ${role} ${real} is not a regular file`, OUTSIDE_HINT, {
      role,
      path: real,
    });
  }
  return real;
}

/**
 * The format a rootfs is given to QEMU as (`qemu-img create -F`), decided by its name: `.qcow2`
 * (or `.qcow`) is qcow2, anything else raw. Always explicit, so QEMU never probes a raw file's
 * content: a raw rootfs whose bytes look like a qcow2 header stays raw data.
 */
export function rootfsFormat(file: string): "raw" | "qcow2" {
  return /\.qcow2?$/i.test(file) ? "qcow2" : "raw";
}

const QCOW2_MAGIC = 0x514649fb; // "QFI\xfb"
/** Incompatible feature bit 2: the guest data lives in an external data file. */
const QCOW2_EXTERNAL_DATA = 1n << 2n;
/** Header extension that names the external data file ("DATA"). */
const QCOW2_EXT_DATA_FILE = 0x44415441;
/** How much of a qcow2 file the header check reads: the header and its extensions fit in it. */
const QCOW2_HEADER_BYTES = 64 * 1024;

/**
 * Refuses a rootfs that QEMU would open as qcow2 (see {@link rootfsFormat}) unless it stands
 * alone: a qcow2 header with a backing file, or an external data file (feature bit or header
 * extension), would make QEMU read that other host file into the guest's disk. A raw rootfs
 * needs no check: it is never parsed.
 */
export async function assertStandaloneRootfs(realDir: string, rootfs: string): Promise<void> {
  if (rootfsFormat(rootfs) !== "qcow2") return;
  const header = Buffer.alloc(QCOW2_HEADER_BYTES);
  let length: number;
  const handle = await fsp.open(rootfs, "r");
  try {
    ({ bytesRead: length } = await handle.read(header, 0, header.length, 0));
  } finally {
    await handle.close();
  }
  const refuse = (problem: string): VmError =>
    invalidImage(
      realDir,
      `the image's rootfs ${rootfs} ${problem}; a guest image's rootfs must stand alone`,
      "convert it into one standalone file (`qemu-img convert -O raw ROOTFS rootfs.ext4`) or use an image built by `pi-sandbox image build`",
      { role: "rootfs", path: rootfs, problem },
    );
  if (length < 72 || header.readUInt32BE(0) !== QCOW2_MAGIC) throw refuse("is named .qcow2 but is not a qcow2 image");
  const version = header.readUInt32BE(4);
  if (version !== 2 && version !== 3) throw refuse(`is a qcow2 image of unknown version ${version}`);
  if (header.readBigUInt64BE(8) !== 0n) throw refuse("is a qcow2 image with a backing file");
  let extensions = 72;
  if (version === 3) {
    if (length < 104) throw refuse("has a truncated qcow2 header");
    if ((header.readBigUInt64BE(72) & QCOW2_EXTERNAL_DATA) !== 0n) {
      throw refuse("is a qcow2 image with an external data file");
    }
    extensions = header.readUInt32BE(100);
  }
  // Header extensions: type u32, length u32, data padded to 8 bytes; type 0 ends the list.
  for (let at = extensions; ;) {
    if (at + 8 > length) throw refuse("has a qcow2 header too large to check");
    const type = header.readUInt32BE(at);
    if (type === 0) return;
    if (type === QCOW2_EXT_DATA_FILE) throw refuse("is a qcow2 image with an external data file");
    at += 8 + Math.ceil(header.readUInt32BE(at + 4) / 8) * 8;
  }
}
