// The image ids: hashes of every input that can change the produced bytes. A recipe is
// `{features, packages, npmTools, fdLink, sizeGiB}` as src/recipe.ts resolves it.
import { createHash } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import {
  BASE_PACKAGES,
  HOST_TOOLS,
  KERNEL_META_PACKAGE,
  NPM_TOOLS,
  ROOTFS_BASE_PACKAGES,
  SUITE,
  GUEST_SOURCE_PATCHES,
  ZIG_BUILD_FLAGS,
  ZIG_VERSION,
} from "./config.mjs";
import { run } from "./proc.mjs";

/** This directory: the builder's own text is an input of every image. */
export const builderDir = path.dirname(fileURLToPath(import.meta.url));

/** Directory of the installed @earendil-works/gondolin package. */
export function gondolinDir() {
  const require = createRequire(import.meta.url);
  return path.dirname(require.resolve("@earendil-works/gondolin/package.json"));
}

export async function gondolinVersion() {
  const pkg = JSON.parse(await readFile(path.join(gondolinDir(), "package.json"), "utf8"));
  return pkg.version;
}

async function listFiles(dir) {
  const out = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await listFiles(full)));
    else if (entry.isFile()) out.push(full);
  }
  return out.sort();
}

/** sha256 over the relative names and contents of every file below `dir`. */
export async function hashTree(dir) {
  const hash = createHash("sha256");
  for (const file of await listFiles(dir)) {
    hash.update(`${path.relative(dir, file)}\0`);
    hash.update(await readFile(file));
    hash.update("\0");
  }
  return hash.digest("hex");
}

function digest(value) {
  return createHash("sha256").update(JSON.stringify(value)).digest("hex").slice(0, 24);
}

/** Key of the compiled guest helpers: Gondolin version, its guest sources, Zig version and flags. */
export async function helperInputs() {
  const inputs = {
    gondolin: await gondolinVersion(),
    guestSources: await hashTree(path.join(gondolinDir(), "dist", "guest")),
    zig: ZIG_VERSION,
    flags: ZIG_BUILD_FLAGS,
    patches: GUEST_SOURCE_PATCHES,
  };
  return { inputs, key: digest(inputs) };
}

/** The exact kernel package behind the meta package, e.g. linux-image-6.1.0-57-cloud-amd64. */
export async function kernelPackage() {
  const out = await run("apt-cache", ["depends", KERNEL_META_PACKAGE]);
  const match = /Depends:\s*(linux-image-\S+)/.exec(out);
  if (!match) {
    throw new Error(
      `apt-cache knows no dependency of ${KERNEL_META_PACKAGE}. Run "apt-get update" (as root) and try again.`,
    );
  }
  const name = match[1];
  return { name, kernelRelease: name.replace(/^linux-image-/, "") };
}

/** Candidate versions of packages, as `apt-cache policy` reports them. */
export async function candidateVersions(names) {
  const out = await run("apt-cache", ["policy", ...names]);
  const versions = {};
  let current;
  for (const line of out.split("\n")) {
    const head = /^(\S+):$/.exec(line);
    if (head) current = head[1];
    const cand = /^\s+Candidate:\s*(\S+)/.exec(line);
    if (cand && current) versions[current] = cand[1];
  }
  return versions;
}

/**
 * Versions debootstrap will install: every package in the dependency closure of the requested
 * and base packages, at its version in the suite's main component (debootstrap uses that suite
 * alone, not -updates or -security).
 */
async function rootfsVersions(packages) {
  const out = await run("apt-cache", [
    "depends",
    "--recurse",
    "--no-recommends",
    "--no-suggests",
    "--no-conflicts",
    "--no-breaks",
    "--no-replaces",
    "--no-enhances",
    ...packages,
    ...ROOTFS_BASE_PACKAGES,
  ]);
  const names = [...new Set(out.split("\n").filter((l) => /^[a-z0-9]/.test(l)))].sort();
  const madison = await run("apt-cache", ["madison", ...names]);
  const versions = {};
  for (const line of madison.split("\n")) {
    const cols = line.split("|").map((c) => c.trim());
    if (cols.length < 3 || !cols[2].includes(` ${SUITE}/main `)) continue;
    if (cols[2].includes("Sources")) continue;
    versions[cols[0]] ??= cols[1];
  }
  return versions;
}

async function hostToolVersions() {
  const out = await run("dpkg-query", ["-W", "-f", "${Package} ${Version}\n", ...HOST_TOOLS]).catch(() => "");
  return out.trim().split("\n").sort();
}

/** The packages debootstrap adds to minbase for `recipe`: the base ones, then the recipe's. */
export function rootfsPackages(recipe) {
  return [...new Set([...BASE_PACKAGES, ...recipe.packages])];
}

/** Everything that determines the image bytes for `recipe`, and the id derived from it. */
export async function imageInputs(recipe) {
  const helpers = await helperInputs();
  const kernel = await kernelPackage();
  const candidates = await candidateVersions([kernel.name, "busybox-static"]);
  const inputs = {
    helpers: helpers.key,
    kernel: { ...kernel, version: candidates[kernel.name] ?? null },
    busybox: candidates["busybox-static"] ?? null,
    suite: SUITE,
    rootfs: await rootfsVersions(rootfsPackages(recipe)),
    npmTools: Object.fromEntries(recipe.npmTools.map((tool) => [tool, NPM_TOOLS[tool]])),
    recipe,
    hostTools: await hostToolVersions(),
    builder: await hashTree(builderDir),
  };
  const unknown = recipe.packages.filter((name) => !(name in inputs.rootfs));
  if (unknown.length > 0) {
    const err = new Error(`Debian ${SUITE} has no package ${unknown.join(", ")} (checked with apt-cache)`);
    err.code = "UNKNOWN_PACKAGE";
    err.packages = unknown;
    throw err;
  }
  if (!inputs.kernel.version || !inputs.busybox || Object.keys(inputs.rootfs).length === 0) {
    throw new Error(
      `apt-cache has no candidate for the kernel, busybox-static or ${SUITE} packages; run "apt-get update".`,
    );
  }
  return { inputs, key: digest(inputs), helperInputs: helpers };
}
