// A guest image from an untrusted repository boots only from files inside its own directory:
// `../` and symlinks out are refused, files must match the manifest's sha256 (hashed once, then
// remembered under the state root), and a qcow2 rootfs may not pull in another host file.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { DiskStore, isVmError, loadImageDir } from "../src/index.js";
import { imageChecksumsFile } from "../src/filenames.js";
import { fakeImage, tempDir, topLayer } from "./support/helpers.js";

let root: string;
let cleanup: () => Promise<void>;
let image: string;
let stateRoot: string;
/** A host file an attacker would like the guest to read. */
let secret: string;

const FILES = { kernel: "vmlinuz-virt", initramfs: "initramfs.cpio.lz4", rootfs: "rootfs.ext4" } as const;

function sha256(file: string): string {
  return createHash("sha256").update(fs.readFileSync(file)).digest("hex");
}

/** Writes `manifest.json` naming `assets` (default names), with the files' true checksums unless given. */
async function writeManifest(
  dir: string,
  options: { assets?: Partial<Record<keyof typeof FILES, string>>; checksums?: Record<string, string> | null } = {},
): Promise<void> {
  const assets = { ...FILES, ...options.assets };
  const checksums =
    options.checksums === null
      ? undefined
      : (options.checksums ??
        Object.fromEntries(Object.entries(assets).map(([role, file]) => [role, sha256(path.resolve(dir, file))])));
  await fsp.writeFile(
    path.join(dir, "manifest.json"),
    JSON.stringify({ version: 1, assets, ...(checksums ? { checksums } : {}) }),
  );
}

async function loadError(dir: string): Promise<unknown> {
  return loadImageDir(dir, { stateRoot }).then(
    () => undefined,
    (error: unknown) => error,
  );
}

function cacheEntries(): Record<string, { sha256: string }> {
  return (
    JSON.parse(fs.readFileSync(imageChecksumsFile(stateRoot), "utf8")) as { files: Record<string, { sha256: string }> }
  ).files;
}

beforeEach(async () => {
  ({ dir: root, cleanup } = await tempDir());
  image = await fakeImage(path.join(root, "image"), 1);
  stateRoot = path.join(root, "state");
  secret = path.join(root, "id_ed25519");
  await fsp.writeFile(secret, "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n");
});
afterEach(async () => cleanup());

test("a good image loads, with the real paths of its files even when reached through a symlink", async () => {
  await writeManifest(image);
  const link = path.join(root, "image-link");
  await fsp.symlink(image, link);
  const loaded = await loadImageDir(link, { stateRoot });
  expect(loaded).toEqual({
    dir: image,
    kernelPath: path.join(image, FILES.kernel),
    initrdPath: path.join(image, FILES.initramfs),
    rootfsPath: path.join(image, FILES.rootfs),
  });
});

test("a manifest naming ../outside as the rootfs is refused, naming the role and where it resolves", async () => {
  await writeManifest(image, { assets: { rootfs: "../id_ed25519" } });
  const error = await loadError(image);
  expect(isVmError(error, "VM_IMAGE_INVALID")).toBe(true);
  expect((error as Error).message).toContain("rootfs");
  expect((error as Error).message).toContain(secret);
  expect(error).toMatchObject({ hint: expect.stringContaining("inside its directory"), details: { role: "rootfs" } });
});

test("an asset that is a symlink out of the image is refused, even with a checksum that matches", async () => {
  await fsp.rm(path.join(image, FILES.initramfs));
  await fsp.symlink(secret, path.join(image, FILES.initramfs));
  await writeManifest(image);
  const error = await loadError(image);
  expect(isVmError(error, "VM_IMAGE_INVALID")).toBe(true);
  expect((error as Error).message).toContain("initramfs");
  expect((error as Error).message).toContain(secret);
});

test("a manifest that is a symlink to a host file is refused without quoting that file", async () => {
  // JSON.parse's own message would quote a short file whole ("ghp_…" is not valid JSON).
  const token = path.join(root, "token");
  await fsp.writeFile(token, "ghp_0123456789abcdef");
  await fsp.symlink(token, path.join(image, "manifest.json"));
  const error = await loadError(image);
  expect(isVmError(error, "VM_IMAGE_INVALID")).toBe(true);
  expect(JSON.stringify(error)).not.toContain("ghp_");
});

test("a file that does not match the manifest's sha256 is refused, naming the file and the manifest", async () => {
  await writeManifest(image);
  await fsp.writeFile(path.join(image, FILES.kernel), "another kernel");
  const error = await loadError(image);
  expect(isVmError(error, "VM_IMAGE_INVALID")).toBe(true);
  expect((error as Error).message).toContain(path.join(image, FILES.kernel));
  expect((error as Error).message).toContain(path.join(image, "manifest.json"));
});

test("an unchanged image is hashed once for every process; a file with a new mtime is hashed again", async () => {
  await writeManifest(image);
  const kernel = path.join(image, FILES.kernel);
  const then = new Date("2024-01-01T00:00:00Z");
  await fsp.utimes(kernel, then, then);
  await loadImageDir(image, { stateRoot });
  expect(Object.values(cacheEntries()).map((entry) => entry.sha256)).toContain(sha256(kernel));
  // Same size, same inode, old mtime: the remembered hash answers and the new bytes go unread.
  await fsp.writeFile(kernel, "kernal");
  await fsp.utimes(kernel, then, then);
  await expect(loadImageDir(image, { stateRoot })).resolves.toMatchObject({ kernelPath: kernel });
  // A new mtime: hashed again, and the change is found.
  const later = new Date("2024-01-02T00:00:00Z");
  await fsp.utimes(kernel, later, later);
  expect(isVmError(await loadError(image), "VM_IMAGE_INVALID")).toBe(true);
  // What was remembered is in the file, not in this process: without it the change is found too.
  await fsp.utimes(kernel, then, then);
  await fsp.rm(imageChecksumsFile(stateRoot));
  expect(isVmError(await loadError(image), "VM_IMAGE_INVALID")).toBe(true);
});

test("a manifest without checksums loads after the other checks, and remembers nothing", async () => {
  await writeManifest(image, { checksums: null });
  await expect(loadImageDir(image, { stateRoot })).resolves.toMatchObject({ dir: image });
  expect(fs.existsSync(imageChecksumsFile(stateRoot))).toBe(false);
  await writeManifest(image, { checksums: null, assets: { kernel: "../id_ed25519" } });
  expect(isVmError(await loadError(image), "VM_IMAGE_INVALID")).toBe(true);
});

test("a qcow2 rootfs with a backing file or an external data file is refused; a standalone one loads", async () => {
  const qcow2 = path.join(image, "rootfs.qcow2");
  execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", "-b", secret, "-F", "raw", qcow2, "1M"]);
  await writeManifest(image, { assets: { rootfs: "rootfs.qcow2" } });
  let error = await loadError(image);
  expect(isVmError(error, "VM_IMAGE_INVALID")).toBe(true);
  expect((error as Error).message).toContain("backing file");
  await fsp.rm(qcow2);
  execFileSync("qemu-img", [
    "create",
    "-q",
    "-f",
    "qcow2",
    "-o",
    `data_file=${path.join(image, "data.raw")}`,
    qcow2,
    "1M",
  ]);
  await writeManifest(image, { assets: { rootfs: "rootfs.qcow2" } });
  error = await loadError(image);
  expect(isVmError(error, "VM_IMAGE_INVALID")).toBe(true);
  expect((error as Error).message).toContain("external data file");
  await fsp.rm(qcow2);
  execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", qcow2, "1M"]);
  await writeManifest(image, { assets: { rootfs: "rootfs.qcow2" } });
  await expect(loadImageDir(image, { stateRoot })).resolves.toMatchObject({ rootfsPath: qcow2 });
});

test("a raw rootfs stays raw for QEMU even when its bytes are a qcow2 header with a backing file", async () => {
  const rootfs = path.join(image, FILES.rootfs);
  await fsp.rm(rootfs);
  execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", "-b", secret, "-F", "raw", rootfs, "64M"]);
  await writeManifest(image);
  const disk = path.join(root, "disk");
  await new DiskStore({ stateRoot }).createDisk(disk, { image, diskGiB: 1 });
  const info = JSON.parse(
    execFileSync("qemu-img", ["info", "--output=json", "--backing-chain", "-U", topLayer(disk)], { encoding: "utf8" }),
  ) as { filename: string; format: string; "backing-filename-format"?: string }[];
  expect(info.map((layer) => [layer.filename, layer.format])).toEqual([
    [topLayer(disk), "qcow2"],
    [rootfs, "raw"],
  ]);
});

test("a disk's image is checked again when it opens: a file swapped for a symlink out is refused", async () => {
  await writeManifest(image);
  const store = new DiskStore({ stateRoot });
  const disk = path.join(root, "disk");
  await store.createDisk(disk, { image, diskGiB: 1 });
  const run = await store.openRun(disk);
  await run.discard();
  await fsp.rm(path.join(image, FILES.kernel));
  await fsp.symlink(secret, path.join(image, FILES.kernel));
  const error = await store.openRun(disk).catch((e: unknown) => e);
  expect(isVmError(error, "VM_IMAGE_INVALID")).toBe(true);
  expect((error as Error).message).toContain(secret);
});

test("a disk recorded before these checks, through a symlinked image path, still opens", async () => {
  await writeManifest(image);
  const link = path.join(root, "image-link");
  await fsp.symlink(image, link);
  const store = new DiskStore({ stateRoot });
  const disk = path.join(root, "disk");
  // What the old loader recorded: the directory as given and its files joined to it.
  await store.createDisk(disk, {
    image: {
      dir: link,
      kernelPath: path.join(link, FILES.kernel),
      initrdPath: path.join(link, FILES.initramfs),
      rootfsPath: path.join(link, FILES.rootfs),
    },
    diskGiB: 1,
  });
  const run = await store.openRun(disk);
  expect(run.image.rootfsPath).toBe(path.join(link, FILES.rootfs));
  await run.discard();
});
