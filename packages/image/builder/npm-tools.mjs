// Node 24, npm (with node-gyp) and bun for the guest, from pinned npm registry tarballs. The
// tarballs are fetched with `npm pack` into the cache (kept across builds, checked against the
// pinned integrity every time) and unpacked into the root filesystem's /usr/local.
import { createHash } from "node:crypto";
import { createReadStream, existsSync } from "node:fs";
import { chmod, copyFile, cp, mkdir, readdir, readFile, rename, rm, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { NPM_TOOLS } from "./config.mjs";
import { log, run } from "./proc.mjs";

/**
 * node-gyp's header cache in the guest, ready-made: `<version>/include` links to the image's Node
 * headers. /init links `$XDG_CACHE_HOME/node-gyp` here (Gondolin's init sets XDG_CACHE_HOME to a
 * tmpfs), and `/root/.cache/node-gyp` links here for environments without XDG_CACHE_HOME.
 */
export const NODE_GYP_CACHE = "/usr/local/share/node-gyp";

/** The guest's global npmrc (only keys npm knows: unknown ones warn on every command). */
const NPMRC = "update-notifier=false\nfund=false\naudit=false\nfetch-retries=5\n";

/** OpenSSL header sets kept from Node's include/node/openssl/archs: only the guest's. */
const OPENSSL_ARCH = "linux-x86_64";

async function integrityOf(file) {
  const hash = createHash("sha512");
  for await (const chunk of createReadStream(file)) hash.update(chunk);
  return `sha512-${hash.digest("base64")}`;
}

/** `@scope/name@1.2.3` -> `scope-name-1.2.3.tgz`, npm pack's own naming. */
export function tarballName(spec) {
  return `${spec.replace(/^@/, "").replace(/[/@]/g, "-")}.tgz`;
}

/**
 * Make sure the tarball of each of `tools` (names in NPM_TOOLS) is in `<root>/downloads` with its
 * pinned integrity.
 * @returns {Promise<Record<string, string>>} tool name -> tarball path
 */
export async function fetchNpmTools(root, tools, logFile) {
  const dir = path.join(root, "downloads");
  await mkdir(dir, { recursive: true });
  const out = {};
  for (const tool of tools) {
    const { spec, integrity } = NPM_TOOLS[tool];
    const file = path.join(dir, tarballName(spec));
    if (existsSync(file) && (await integrityOf(file)) === integrity) {
      out[tool] = file;
      continue;
    }
    log(`npm pack ${spec}`);
    const staging = path.join(dir, `.pack-${process.pid}-${tool}`);
    await rm(staging, { recursive: true, force: true });
    await mkdir(staging);
    try {
      await run("npm", ["pack", spec, "--pack-destination", staging, "--silent"], { cwd: staging, logFile });
      const [packed] = (await readdir(staging)).filter((f) => f.endsWith(".tgz"));
      if (!packed) throw new Error(`npm pack ${spec} produced no tarball in ${staging}`);
      const actual = await integrityOf(path.join(staging, packed));
      if (actual !== integrity) {
        throw new Error(
          `npm pack ${spec} gave integrity ${actual}, but @pi-sandbox/image builder/config.mjs pins ${integrity}. ` +
            "If the version was changed on purpose, pin its integrity (npm view <spec> dist.integrity).",
        );
      }
      await rename(path.join(staging, packed), file);
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
    out[tool] = file;
  }
  return out;
}

async function unpack(tarball, into, logFile) {
  await rm(into, { recursive: true, force: true });
  await mkdir(into, { recursive: true });
  await run("tar", ["-xzf", tarball, "-C", into, "--no-same-owner"], { logFile });
  return path.join(into, "package");
}

async function link(target, at) {
  await rm(at, { force: true });
  await symlink(target, at);
}

/** The version in an unpacked npm package. */
async function versionOf(pkgDir) {
  return JSON.parse(await readFile(path.join(pkgDir, "package.json"), "utf8")).version;
}

/**
 * Node into `<root>/usr/local`: bin/node, include/node (OpenSSL headers of x86_64 Linux only),
 * share/doc/node/LICENSE; and npm in lib/node_modules/npm with bin/npm, bin/npx and bin/node-gyp
 * (npm's bundled node-gyp), and etc/npmrc (NPMRC). node-gyp would download Node's headers from
 * nodejs.org, which guests cannot reach: its header cache for this Node version is prepared in
 * NODE_GYP_CACHE instead. (Setting `nodedir` would do too, but npm 11 warns about that key on
 * every command.)
 */
async function installNode({ root, local, stage, tarballs, logFile }) {
  const node = await unpack(tarballs.node, path.join(stage, "node"), logFile);
  await copyFile(path.join(node, "bin", "node"), path.join(local, "bin", "node"));
  await chmod(path.join(local, "bin", "node"), 0o755);
  await rm(path.join(local, "include", "node"), { recursive: true, force: true });
  await cp(path.join(node, "include", "node"), path.join(local, "include", "node"), { recursive: true });
  const archs = path.join(local, "include", "node", "openssl", "archs");
  if (!existsSync(path.join(archs, OPENSSL_ARCH))) {
    throw new Error(
      `Node's headers have no openssl/archs/${OPENSSL_ARCH}; update @pi-sandbox/image builder/npm-tools.mjs`,
    );
  }
  for (const name of await readdir(archs)) {
    if (name !== OPENSSL_ARCH) await rm(path.join(archs, name), { recursive: true, force: true });
  }
  await copyFile(path.join(node, "LICENSE"), path.join(local, "share", "doc", "node", "LICENSE"));
  const nodeVersion = await versionOf(node);

  const npmStage = await unpack(tarballs.npm, path.join(stage, "npm"), logFile);
  const npmDir = path.join(local, "lib", "node_modules", "npm");
  await rm(npmDir, { recursive: true, force: true });
  await cp(npmStage, npmDir, { recursive: true, verbatimSymlinks: true });
  const gypDir = path.join(npmDir, "node_modules", "node-gyp");
  for (const [name, target] of [
    ["npm", "../lib/node_modules/npm/bin/npm-cli.js"],
    ["npx", "../lib/node_modules/npm/bin/npx-cli.js"],
    ["node-gyp", "../lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js"],
  ]) {
    await chmod(path.join(local, "bin", target), 0o755);
    await link(target, path.join(local, "bin", name));
  }
  const gyp = JSON.parse(await readFile(path.join(gypDir, "package.json"), "utf8"));
  const headerCache = path.join(root, NODE_GYP_CACHE.slice(1), nodeVersion);
  await rm(headerCache, { recursive: true, force: true });
  await mkdir(headerCache, { recursive: true });
  await symlink("/usr/local/include", path.join(headerCache, "include"));
  await writeFile(path.join(headerCache, "installVersion"), `${gyp.installVersion}\n`);
  await mkdir(path.join(root, "root", ".cache"), { recursive: true });
  await link(NODE_GYP_CACHE, path.join(root, "root", ".cache", "node-gyp"));
  // npm's global config: no update check on every command, and more patience with the registry
  // (guests reach it through Gondolin's userspace network stack, slow under TCG).
  await mkdir(path.join(local, "etc"), { recursive: true });
  await writeFile(path.join(local, "etc", "npmrc"), NPMRC);
  return { node: nodeVersion, npm: await versionOf(npmDir), nodeGyp: gyp.version };
}

/** bun into `<root>/usr/local`: bin/bun and bin/bunx. */
async function installBun({ local, stage, tarballs, logFile }) {
  const bun = await unpack(tarballs.bun, path.join(stage, "bun"), logFile);
  await copyFile(path.join(bun, "bin", "bun"), path.join(local, "bin", "bun"));
  await chmod(path.join(local, "bin", "bun"), 0o755);
  await link("bun", path.join(local, "bin", "bunx"));
  return { bun: await versionOf(bun) };
}

/**
 * Unpack the fetched tools (`tarballs`: node and npm, bun, or any of them) into the root
 * filesystem's /usr/local.
 *
 * @returns {Promise<Record<string, string>>} the versions installed, e.g. `{node, npm, nodeGyp, bun}`
 */
export async function installNpmTools({ root, work, tarballs, logFile }) {
  if (Object.keys(tarballs).length === 0) return {};
  log(`installing ${Object.keys(tarballs).join(", ")} into /usr/local`);
  const stage = path.join(work, "npm-tools");
  const local = path.join(root, "usr", "local");
  for (const sub of ["bin", "include", "lib/node_modules", "share/doc/node"]) {
    await mkdir(path.join(local, sub), { recursive: true });
  }
  const context = { root, local, stage, tarballs, logFile };
  const versions = {
    ...(tarballs.node ? await installNode(context) : {}),
    ...(tarballs.bun ? await installBun(context) : {}),
  };
  await rm(stage, { recursive: true, force: true });
  return versions;
}
