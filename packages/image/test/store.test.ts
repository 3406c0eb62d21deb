// The image store in the user's cache (`image import|list|inspect|rm`): imports checked against
// their manifest, names resolved to builds, and a build deleted with the last name that points to it.
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import {
  imageCacheRoot,
  imageDir,
  importImage,
  inspectImage,
  isImageError,
  listImages,
  removeImage,
  resolveImageRef,
} from "../src/index.js";

let work: string;
let root: string;

beforeEach(async () => {
  work = await mkdtemp(path.join(tmpdir(), "image-store-"));
  root = imageCacheRoot({ XDG_CACHE_HOME: path.join(work, "cache") });
});
afterEach(() => rm(work, { recursive: true, force: true }));

const sha256 = (text: string): string => createHash("sha256").update(text).digest("hex");

/** A small assets directory shaped like a build's output (the files' contents are stand-ins). */
async function assetsDir(name: string, overrides: { rootfs?: string; checksumOf?: string } = {}): Promise<string> {
  const dir = path.join(work, name);
  await mkdir(dir, { recursive: true });
  const files = { kernel: "kernel bytes", initramfs: "initramfs bytes", rootfs: overrides.rootfs ?? "rootfs bytes" };
  await writeFile(path.join(dir, "vmlinuz-virt"), files.kernel);
  await writeFile(path.join(dir, "initramfs.cpio.lz4"), files.initramfs);
  await writeFile(path.join(dir, "rootfs.ext4"), files.rootfs);
  const manifest = {
    version: 1,
    buildId: "b-1",
    config: { features: ["node"], tools: { node: "24.22.3" }, kernelRelease: "6.1.0-57-cloud-amd64" },
    assets: { kernel: "vmlinuz-virt", initramfs: "initramfs.cpio.lz4", rootfs: "rootfs.ext4" },
    checksums: {
      kernel: sha256(files.kernel),
      initramfs: sha256(files.initramfs),
      rootfs: sha256(overrides.checksumOf ?? files.rootfs),
    },
  };
  await writeFile(path.join(dir, "manifest.json"), JSON.stringify(manifest));
  await writeFile(path.join(dir, "packages.txt"), "python3 3.11.2-1+b1\nopenssh-server 1:9.2p1-2\n");
  return dir;
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (isImageError(error)) return `${error.code}: ${error.message} | ${error.hint ?? ""}`;
    throw error;
  }
  throw new Error("expected an ImageError");
}

test("an imported directory is listed by name and resolves to its copy in the cache", async () => {
  const imported = await importImage(root, await assetsDir("built-elsewhere"), "dev");
  expect(imported.dir.startsWith(path.join(root, "builds"))).toBe(true);
  expect(await readFile(path.join(imported.dir, "rootfs.ext4"), "utf8")).toBe("rootfs bytes");
  expect((await listImages(root)).map((i) => [i.name, i.id, i.features])).toEqual([["dev", imported.id, ["node"]]]);
  expect(await imageDir(root, "dev")).toBe(imported.dir);
});

test("inspect shows the manifest, the packages and the tool versions", async () => {
  await importImage(root, await assetsDir("src"), "dev");
  const details = await inspectImage(root, "dev");
  expect(details.manifest.buildId).toBe("b-1");
  expect(details.packages).toEqual(["python3 3.11.2-1+b1", "openssh-server 1:9.2p1-2"]);
  expect(details.tools).toEqual({ node: "24.22.3", kernel: "6.1.0-57-cloud-amd64" });
  expect(details.rootfsBytes).toBe("rootfs bytes".length);
});

test("import refuses a directory without rootfs.ext4, naming the file", async () => {
  const dir = await assetsDir("partial");
  await rm(path.join(dir, "rootfs.ext4"));
  expect(await codeOf(importImage(root, dir, "dev"))).toMatch(/^IMAGE_INVALID: .*rootfs\.ext4 is missing/);
  expect(await listImages(root)).toEqual([]);
});

test("import refuses a file that does not match the manifest's checksum (a partial copy)", async () => {
  const dir = await assetsDir("truncated", { rootfs: "rootfs by", checksumOf: "rootfs bytes" });
  expect(await codeOf(importImage(root, dir, "dev"))).toMatch(/^IMAGE_INVALID: .*does not match its checksum/);
});

test("import refuses a directory without a manifest", async () => {
  const dir = await assetsDir("no-manifest");
  await rm(path.join(dir, "manifest.json"));
  expect(await codeOf(importImage(root, dir, "dev"))).toMatch(/^IMAGE_INVALID: .*manifest\.json is missing/);
});

test("an image name outside the name rule is refused before anything is copied", async () => {
  expect(await codeOf(importImage(root, await assetsDir("x"), "Dev Image"))).toMatch(/^IMAGE_INVALID_NAME/);
});

test("a name that was never built resolves to IMAGE_NOT_FOUND whose hint is the build command", async () => {
  const env = { XDG_CACHE_HOME: path.join(work, "cache") };
  expect(await codeOf(resolveImageRef("node-dev", env))).toMatch(
    /^IMAGE_NOT_FOUND: no image named node-dev .*`pi-sandbox image build node-dev`/,
  );
});

test("a path is not looked up: resolveImageRef returns it as given", async () => {
  expect(await resolveImageRef("/opt/images/dev", { XDG_CACHE_HOME: work })).toBe("/opt/images/dev");
});

test("rm of one of two names keeps the build; rm of the last one deletes it", async () => {
  const dir = await assetsDir("src");
  const first = await importImage(root, dir, "a");
  await importImage(root, dir, "b");
  expect(await removeImage(root, "a")).toEqual({ name: "a", id: first.id, deleted: false });
  expect((await stat(first.dir)).isDirectory()).toBe(true);
  expect(await removeImage(root, "b")).toEqual({ name: "b", id: first.id, deleted: true });
  await expect(stat(first.dir)).rejects.toThrow();
  expect(await listImages(root)).toEqual([]);
});
