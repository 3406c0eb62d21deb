// Orchestration: reuse a cached image or build one under the cache lock. The package's
// src/build.ts checks the host first and calls ensureImage with a resolved recipe.
import { existsSync } from "node:fs";
import { copyFile, mkdir, readdir, stat, utimes, writeFile } from "node:fs/promises";
import path from "node:path";
import { acquireLock, buildDir, makeBuildDir, publish, removeBuildDir, sweepStaleBuilds } from "./cache.mjs";
import { SUITE, ZIG_VERSION } from "./config.mjs";
import { fetchBusybox, fetchKernel } from "./debian.mjs";
import { ensureHelpers } from "./helpers.mjs";
import { buildInitramfs, gondolinInitScripts } from "./initramfs.mjs";
import { gondolinVersion, imageInputs, rootfsPackages } from "./inputs.mjs";
import { ASSET_FILES, writeManifest } from "./manifest.mjs";
import { debootstrap, customizeRootfs, makeExt4 } from "./rootfs.mjs";
import { fetchNpmTools, installNpmTools } from "./npm-tools.mjs";
import { log, run } from "./proc.mjs";

/** A cache entry counts only once its manifest exists; entries appear by an atomic rename. */
export function isComplete(dir) {
  return (
    existsSync(path.join(dir, "manifest.json")) &&
    Object.values(ASSET_FILES).every((f) => existsSync(path.join(dir, f)))
  );
}

/** Build the assets for `key` into a temporary directory and publish it as `<root>/builds/<key>`. */
async function buildImage(root, { key, inputs, helperInputs }) {
  const recipe = inputs.recipe;
  const started = Date.now();
  const work = await makeBuildDir(root, key);
  const logs = path.join(work, "logs");
  await mkdir(logs);
  log(`building image ${key} in ${work} (logs in ${logs})`);
  try {
    const scripts = await gondolinInitScripts();
    const helpersPromise = ensureHelpers(root, helperInputs.key);
    const debs = (async () => {
      const kernel = await fetchKernel(work, inputs.kernel, path.join(logs, "kernel.log"));
      const busybox = await fetchBusybox(work, inputs.busybox, path.join(logs, "busybox.log"));
      return { kernel, busybox };
    })();
    const rootfsTree = debootstrap(work, rootfsPackages(recipe), path.join(logs, "debootstrap.log"));
    const npmTarballs = fetchNpmTools(root, recipe.npmTools, path.join(logs, "npm-tools.log"));
    // Keep every promise observed so a failure in one does not become an unhandled rejection.
    const [helpersDir, { kernel, busybox }, rootfsDir, tarballs] = await Promise.all([
      helpersPromise,
      debs,
      rootfsTree,
      npmTarballs,
    ]);

    const out = path.join(work, "out");
    await mkdir(out);
    const kernelRelease = inputs.kernel.kernelRelease;
    await copyFile(kernel.vmlinuz, path.join(out, ASSET_FILES.kernel));
    await buildInitramfs({
      work,
      kernel,
      kernelRelease,
      busybox,
      initScript: scripts.initramfs,
      outFile: path.join(out, ASSET_FILES.initramfs),
    });
    const tools = await installNpmTools({ root: rootfsDir, work, tarballs, logFile: path.join(logs, "npm-tools.log") });
    const toolList = Object.entries(tools).map(([tool, version]) => `${tool} ${version}`);
    if (toolList.length > 0) log(`guest tools: ${toolList.join(", ")}`);
    await customizeRootfs({
      root: rootfsDir,
      helpersDir,
      kernel,
      kernelRelease,
      initScript: scripts.rootfs,
      fdLink: recipe.fdLink,
    });
    const packages = await run("dpkg-query", [
      "--admindir",
      path.join(rootfsDir, "var/lib/dpkg"),
      "-W",
      "-f",
      "${Package} ${Version}\n",
    ]);
    await makeExt4({
      root: rootfsDir,
      outFile: path.join(out, ASSET_FILES.rootfs),
      logFile: path.join(logs, "mke2fs.log"),
      sizeGiB: recipe.sizeGiB,
    });

    const manifest = await writeManifest(out, {
      arch: "x86_64",
      distribution: `debian-${SUITE}`,
      kernelRelease,
      packages: rootfsPackages(recipe),
      features: recipe.features,
      tools,
      gondolinVersion: await gondolinVersion(),
      zigVersion: ZIG_VERSION,
    });
    await writeFile(path.join(out, "packages.txt"), packages.split("\n").filter(Boolean).sort().join("\n") + "\n");
    await writeFile(path.join(out, "inputs.json"), `${JSON.stringify({ key, ...inputs }, null, 2)}\n`);
    const finalDir = buildDir(root, key);
    await mkdir(path.dirname(finalDir), { recursive: true });
    await publish(out, finalDir);
    const seconds = ((Date.now() - started) / 1000).toFixed(0);
    const rootfsMiB = ((await stat(path.join(finalDir, ASSET_FILES.rootfs))).size / 2 ** 20).toFixed(0);
    log(`built image ${key} (buildId ${manifest.buildId}, rootfs ${rootfsMiB} MiB) in ${seconds} s`);
    return finalDir;
  } finally {
    await removeBuildDir(work);
  }
}

/** Images kept besides the current one; older ones are deleted once they are a day old. */
const KEEP_IMAGES = 3;
const PRUNE_AFTER_MS = 24 * 60 * 60 * 1000;

/**
 * Delete old image entries so the cache does not grow without bound. Recent ones stay even when
 * superseded: a running test or a qcow2 overlay may still use them as its backing file.
 */
async function pruneOldImages(root, currentKey, keep) {
  const entries = [];
  const builds = path.join(root, "builds");
  for (const name of await readdir(builds)) {
    if (!/^[0-9a-f]{24}$/.test(name) || name === currentKey || keep.has(name)) continue;
    entries.push({ name, mtimeMs: (await stat(path.join(builds, name))).mtimeMs });
  }
  entries.sort((a, b) => b.mtimeMs - a.mtimeMs);
  for (const entry of entries.slice(KEEP_IMAGES)) {
    if (Date.now() - entry.mtimeMs < PRUNE_AFTER_MS) continue;
    log(`pruning old image ${entry.name}`);
    await removeBuildDir(path.join(builds, entry.name));
  }
}

let aptUpdated = false;

/** Marks an entry as just used, so pruning by age keeps what is in use. */
async function touch(dir) {
  const now = new Date();
  await utimes(dir, now, now).catch(() => undefined);
}

/**
 * Return a complete assets directory for `recipe`, building it when the cache has none.
 * A cached entry is found from the host's apt lists alone: no network, no root, no lock.
 *
 * @param {{root: string, recipe: object, rebuild?: boolean, prune?: {keep: Set<string>}, preflight?: () => Promise<void>}} options
 *   `prune`: after a build, delete old unnamed entries (ids in `keep` stay). `preflight`: called
 *   before anything is built (not when a cached image is reused); it throws what is missing.
 * @returns {Promise<{dir: string, id: string, reused: boolean}>}
 */
export async function ensureImage({ root, recipe, rebuild = false, prune, preflight }) {
  // Without apt lists (a fresh machine) the inputs cannot be computed yet: update them first.
  const early = await imageInputs(recipe).catch((err) => {
    log(`cannot compute the image inputs yet (${err.message.split("\n")[0]})`);
    return undefined;
  });
  if (early && !rebuild && isComplete(buildDir(root, early.key))) {
    const dir = buildDir(root, early.key);
    log(`reusing cached image ${dir}`);
    await touch(dir);
    return { dir, id: early.key, reused: true };
  }
  await preflight?.();
  const release = await acquireLock(root);
  try {
    await sweepStaleBuilds(root);
    if (!aptUpdated && process.getuid?.() === 0) {
      log("apt-get update");
      await run("apt-get", ["update", "-qq"], { capture: false });
      aptUpdated = true;
    }
    const current = await imageInputs(recipe);
    const dir = buildDir(root, current.key);
    if (isComplete(dir)) {
      if (!rebuild) {
        log(`reusing cached image ${dir} (built by another run)`);
        return { dir, id: current.key, reused: true };
      }
      await removeBuildDir(dir);
    }
    const built = await buildImage(root, current);
    if (prune) await pruneOldImages(root, current.key, prune.keep);
    return { dir: built, id: current.key, reused: false };
  } finally {
    await release();
  }
}
