// Orchestration: reuse a cached image or build one under the cache lock.
import { existsSync } from "node:fs";
import { copyFile, mkdir, readdir, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { acquireLock, cacheRoot, makeBuildDir, publish, removeBuildDir, sweepStaleBuilds } from "./cache.mjs";
import { ROOTFS_PACKAGES, SUITE, ZIG_VERSION } from "./config.mjs";
import { fetchBusybox, fetchKernel } from "./debian.mjs";
import { ensureHelpers } from "./helpers.mjs";
import { buildInitramfs, gondolinInitScripts } from "./initramfs.mjs";
import { gondolinVersion, imageInputs } from "./inputs.mjs";
import { ASSET_FILES, writeManifest } from "./manifest.mjs";
import { debootstrap, customizeRootfs, makeExt4 } from "./rootfs.mjs";
import { fetchNpmTools, installNpmTools } from "./npm-tools.mjs";
import { log, run } from "./proc.mjs";

/** A cache entry counts only once its manifest exists; entries appear by an atomic rename. */
function isComplete(dir) {
  return (
    existsSync(path.join(dir, "manifest.json")) &&
    Object.values(ASSET_FILES).every((f) => existsSync(path.join(dir, f)))
  );
}

/** Build the assets for `key` into a temporary directory and publish it as `<root>/<key>`. */
async function buildImage(root, { key, inputs, helperInputs }) {
  if (process.getuid?.() !== 0) {
    throw new Error(
      "building the guest test image needs root (debootstrap, chroot, apt-get download). " +
        "Run `npm run -s test-image` as root once, or set PI_SANDBOX_TEST_IMAGE to an existing assets directory.",
    );
  }
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
    const rootfsTree = debootstrap(work, path.join(logs, "debootstrap.log"));
    const npmTarballs = fetchNpmTools(root, path.join(logs, "npm-tools.log"));
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
    log(`guest tools: node ${tools.node}, npm ${tools.npm} (node-gyp ${tools.nodeGyp}), bun ${tools.bun}`);
    await customizeRootfs({ root: rootfsDir, helpersDir, kernel, kernelRelease, initScript: scripts.rootfs });
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
    });

    const manifest = await writeManifest(out, {
      arch: "x86_64",
      distribution: `debian-${SUITE}`,
      kernelRelease,
      packages: ROOTFS_PACKAGES,
      gondolinVersion: await gondolinVersion(),
      zigVersion: ZIG_VERSION,
    });
    await writeFile(path.join(out, "packages.txt"), packages.split("\n").filter(Boolean).sort().join("\n") + "\n");
    await writeFile(path.join(out, "inputs.json"), `${JSON.stringify({ key, ...inputs }, null, 2)}\n`);
    const finalDir = path.join(root, key);
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
async function pruneOldImages(root, currentKey) {
  const entries = [];
  for (const name of await readdir(root)) {
    if (!/^[0-9a-f]{24}$/.test(name) || name === currentKey) continue;
    entries.push({ name, mtimeMs: (await stat(path.join(root, name))).mtimeMs });
  }
  entries.sort((a, b) => b.mtimeMs - a.mtimeMs);
  for (const entry of entries.slice(KEEP_IMAGES)) {
    if (Date.now() - entry.mtimeMs < PRUNE_AFTER_MS) continue;
    log(`pruning old image ${entry.name}`);
    await removeBuildDir(path.join(root, entry.name));
  }
}

let aptUpdated = false;

/** Return the absolute path of a complete assets directory for the current inputs. */
export async function ensureTestImage({ rebuild = false } = {}) {
  const root = cacheRoot();
  // Without apt lists (a fresh machine) the inputs cannot be computed yet: update them first.
  const early = await imageInputs().catch((err) => {
    log(`cannot compute the image inputs yet (${err.message.split("\n")[0]})`);
    return undefined;
  });
  if (early && !rebuild && isComplete(path.join(root, early.key))) {
    const dir = path.join(root, early.key);
    log(`reusing cached image ${dir}`);
    return dir;
  }
  const release = await acquireLock(root);
  try {
    await sweepStaleBuilds(root);
    if (!aptUpdated && process.getuid?.() === 0) {
      log("apt-get update");
      await run("apt-get", ["update", "-qq"], { capture: false });
      aptUpdated = true;
    }
    const current = await imageInputs();
    const dir = path.join(root, current.key);
    if (isComplete(dir)) {
      if (!rebuild) {
        log(`reusing cached image ${dir} (built by another run)`);
        return dir;
      }
      await removeBuildDir(dir);
    }
    const built = await buildImage(root, current);
    await pruneOldImages(root, current.key);
    return built;
  } finally {
    await release();
  }
}
