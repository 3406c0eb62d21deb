// manifest.json in Gondolin's asset format, with the buildId Gondolin itself computes.
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { gondolinDir } from "./inputs.mjs";

export const ASSET_FILES = { kernel: "vmlinuz-virt", initramfs: "initramfs.cpio.lz4", rootfs: "rootfs.ext4" };

async function sha256File(file) {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(file)) hash.update(chunk);
  return hash.digest("hex");
}

/** Gondolin's computeAssetBuildId (dist/src/assets.js), imported by file path. */
async function gondolinBuildId(checksums, arch) {
  const file = path.join(gondolinDir(), "dist", "src", "assets.js");
  const mod = await import(pathToFileURL(file).href);
  if (typeof mod.computeAssetBuildId !== "function") {
    throw new Error(`${file} no longer exports computeAssetBuildId; update @pi-sandbox/image builder/manifest.mjs`);
  }
  return mod.computeAssetBuildId({ checksums, arch });
}

/** Write `<dir>/manifest.json` and return it. */
export async function writeManifest(dir, config) {
  const checksums = {};
  for (const [role, name] of Object.entries(ASSET_FILES)) checksums[role] = await sha256File(path.join(dir, name));
  const manifest = {
    version: 1,
    buildId: await gondolinBuildId(checksums, config.arch),
    config,
    buildTime: new Date().toISOString(),
    assets: { ...ASSET_FILES },
    checksums,
  };
  await writeFile(path.join(dir, "manifest.json"), `${JSON.stringify(manifest, null, 2)}\n`);
  return manifest;
}
