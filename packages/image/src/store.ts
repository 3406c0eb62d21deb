// The image cache: finished images by id under builds/, and names pointing at them under names/.
// `image: <name>` in sandbox.yaml resolves through here to an assets directory.
import { createHash } from "node:crypto";
import { cp, mkdir, readdir, readFile, rename, rm, stat } from "node:fs/promises";
import path from "node:path";
import { isImageName, sha256File } from "@pi-sandbox/config";
import { writeJsonFile } from "./json-file.js";
import { ASSET_FILES, buildDir, cacheRoot, isComplete, removeBuildDir } from "../builder/index.mjs";
import { ImageError } from "./errors.js";

/** What names/<name>.json records. */
export interface NameRecord {
  /** The image name. */
  name: string;
  /** The id of the build it names (24 hex digits). */
  id: string;
  /** When the name was (re)pointed, ISO time. */
  createdAt: string;
  /** How it came: built here, or imported from a directory. */
  source: "build" | "import";
  /** For imports: the directory it was copied from. */
  importedFrom?: string;
}

/** One line of `image list`. */
export interface ImageSummary {
  /** The name, or null for a build no name points at (an older build of a name, a test image). */
  name: string | null;
  /** The build id. */
  id: string;
  /** The assets directory. */
  dir: string;
  /** Apparent size of rootfs.ext4 in bytes. */
  rootfsBytes: number;
  /** Features it was built with (empty for imports without them). */
  features: string[];
  /** When its name was set, or when the build finished. */
  createdAt: string;
}

/** `image inspect`: the summary plus the manifest, package versions and tool versions. */
export interface ImageDetails extends ImageSummary {
  /** Gondolin's manifest.json as written. */
  manifest: Record<string, unknown>;
  /** Debian packages installed, `name version` each (from packages.txt; empty when absent). */
  packages: string[];
  /** Tool versions recorded at build time (node, npm, bun, gondolin, zig, kernel). */
  tools: Record<string, string>;
  /** Bytes the assets take on disk (allocated, so sparse space is not counted). */
  diskBytes: number;
}

/** The image cache of `env`: `${XDG_CACHE_HOME:-~/.cache}/pi-sandbox/images`. */
export function imageCacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  return cacheRoot(env);
}

const ID_PATTERN = /^[0-9a-f]{24}$/;

function namesDir(root: string): string {
  return path.join(root, "names");
}

/** Throws IMAGE_INVALID_NAME unless `name` follows the name rule. */
export function assertImageName(name: string): void {
  if (isImageName(name)) return;
  throw new ImageError("IMAGE_INVALID_NAME", `${JSON.stringify(name)} is not a valid image name`, {
    hint: 'Use 1–40 characters: a lowercase letter first, then lowercase letters, digits or hyphens (such as "default" or "node-dev").',
    details: { name },
  });
}

async function readName(root: string, name: string): Promise<NameRecord | undefined> {
  try {
    const record = JSON.parse(await readFile(path.join(namesDir(root), `${name}.json`), "utf8")) as NameRecord;
    return ID_PATTERN.test(record.id) ? record : undefined;
  } catch {
    return undefined;
  }
}

/** Points `name` at build `id` (replacing what it named before). */
export async function registerName(root: string, record: Omit<NameRecord, "createdAt">): Promise<NameRecord> {
  assertImageName(record.name);
  const full: NameRecord = { ...record, createdAt: new Date().toISOString() };
  await mkdir(namesDir(root), { recursive: true });
  await writeJsonFile(path.join(namesDir(root), `${record.name}.json`), full);
  return full;
}

async function allNames(root: string): Promise<NameRecord[]> {
  const files = await readdir(namesDir(root)).catch(() => [] as string[]);
  const records = await Promise.all(
    files.filter((f) => f.endsWith(".json")).map((f) => readName(root, f.slice(0, -".json".length))),
  );
  return records.filter((r): r is NameRecord => r !== undefined).sort((a, b) => a.name.localeCompare(b.name));
}

/** The ids some name points at; pruning keeps them. */
export async function namedIds(root: string): Promise<Set<string>> {
  return new Set((await allNames(root)).map((r) => r.id));
}

async function readManifest(dir: string): Promise<Record<string, unknown>> {
  try {
    return JSON.parse(await readFile(path.join(dir, "manifest.json"), "utf8")) as Record<string, unknown>;
  } catch {
    return {};
  }
}

function featuresOf(manifest: Record<string, unknown>): string[] {
  const config = (manifest.config ?? {}) as { features?: unknown };
  return Array.isArray(config.features) ? config.features.map(String) : [];
}

async function summary(root: string, id: string, name: string | null, createdAt?: string): Promise<ImageSummary> {
  const dir = buildDir(root, id);
  const manifest = await readManifest(dir);
  const rootfs = await stat(path.join(dir, ASSET_FILES.rootfs)).catch(() => undefined);
  return {
    name,
    id,
    dir,
    rootfsBytes: rootfs?.size ?? 0,
    features: featuresOf(manifest),
    createdAt: createdAt ?? String(manifest.buildTime ?? ""),
  };
}

/** Every named image, then the builds no name points at. */
export async function listImages(root: string): Promise<ImageSummary[]> {
  const names = await allNames(root);
  const out: ImageSummary[] = [];
  for (const record of names) {
    if (isComplete(buildDir(root, record.id))) out.push(await summary(root, record.id, record.name, record.createdAt));
  }
  const named = new Set(names.map((r) => r.id));
  const builds = await readdir(path.join(root, "builds")).catch(() => [] as string[]);
  for (const id of builds.sort()) {
    if (ID_PATTERN.test(id) && !named.has(id) && isComplete(buildDir(root, id)))
      out.push(await summary(root, id, null));
  }
  return out;
}

function notFound(ref: string): ImageError {
  return new ImageError("IMAGE_NOT_FOUND", `no image named ${ref} has been built`, {
    hint: `Build it with \`pi-sandbox image build ${ref}\` (or import one: \`pi-sandbox image import DIR ${ref}\`); \`pi-sandbox image list\` shows what there is.`,
    details: { name: ref },
  });
}

/** The id a name or an id stands for; throws IMAGE_NOT_FOUND. */
async function idOf(root: string, ref: string): Promise<{ id: string; name: string | null }> {
  const record = isImageName(ref) ? await readName(root, ref) : undefined;
  if (record && isComplete(buildDir(root, record.id))) return { id: record.id, name: record.name };
  if (ID_PATTERN.test(ref) && isComplete(buildDir(root, ref))) return { id: ref, name: null };
  throw notFound(ref);
}

/** The assets directory of an image name (or id); throws IMAGE_NOT_FOUND with the build command. */
export async function imageDir(root: string, ref: string): Promise<string> {
  return buildDir(root, (await idOf(root, ref)).id);
}

/**
 * What an `image:` value means: a name (a bare word, see isImageName) becomes its assets
 * directory in `env`'s cache; anything else is a path and is returned as given.
 */
export async function resolveImageRef(ref: string, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  return isImageName(ref) ? imageDir(imageCacheRoot(env), ref) : ref;
}

async function allocatedBytes(dir: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (entry.isFile()) total += (await stat(path.join(dir, entry.name))).blocks * 512;
  }
  return total;
}

/** `image inspect`: manifest, packages, tool versions and sizes of a name (or id). */
export async function inspectImage(root: string, ref: string): Promise<ImageDetails> {
  const { id, name } = await idOf(root, ref);
  const base = await summary(root, id, name, name ? (await readName(root, name))?.createdAt : undefined);
  const manifest = await readManifest(base.dir);
  const packagesText = await readFile(path.join(base.dir, "packages.txt"), "utf8").catch(() => "");
  const config = (manifest.config ?? {}) as Record<string, unknown>;
  const tools: Record<string, string> = {};
  for (const [tool, version] of Object.entries((config.tools ?? {}) as Record<string, unknown>)) {
    tools[tool] = String(version);
  }
  if (typeof config.gondolinVersion === "string") tools.gondolin = config.gondolinVersion;
  if (typeof config.zigVersion === "string") tools.zig = config.zigVersion;
  if (typeof config.kernelRelease === "string") tools.kernel = config.kernelRelease;
  return {
    ...base,
    manifest,
    packages: packagesText.split("\n").filter(Boolean),
    tools,
    diskBytes: await allocatedBytes(base.dir),
  };
}

/**
 * Removes a name; its build goes too when no other name points at it. An id removes that build.
 * Callers check first that no instance still boots from it.
 */
export async function removeImage(
  root: string,
  ref: string,
): Promise<{ name: string | null; id: string; deleted: boolean }> {
  const { id, name } = await idOf(root, ref);
  if (name) await rm(path.join(namesDir(root), `${name}.json`), { force: true });
  const stillNamed = (await namedIds(root)).has(id);
  if (!stillNamed) await removeBuildDir(buildDir(root, id));
  return { name, id, deleted: !stillNamed };
}

function invalid(dir: string, problem: string): ImageError {
  return new ImageError("IMAGE_INVALID", `${dir} is not a usable image: ${problem}`, {
    hint: "Copy the whole directory `pi-sandbox image build` printed (vmlinuz-virt, initramfs.cpio.lz4, rootfs.ext4, manifest.json), then import it.",
    details: { dir, problem },
  });
}

/**
 * Checks that `dir` is a complete Gondolin assets directory: a manifest naming the three asset
 * files with their sha256 checksums, each file present and matching. Returns the manifest.
 */
export async function validateAssetsDir(dir: string): Promise<Record<string, unknown>> {
  let manifest: { assets?: Record<string, string>; checksums?: Record<string, string>; buildId?: unknown };
  try {
    manifest = JSON.parse(await readFile(path.join(dir, "manifest.json"), "utf8")) as typeof manifest;
  } catch (error) {
    throw invalid(dir, `manifest.json is missing or not JSON (${(error as Error).message})`);
  }
  if (typeof manifest.buildId !== "string") throw invalid(dir, "manifest.json has no buildId");
  const assets = { ...ASSET_FILES, ...(manifest.assets ?? {}) } as Record<string, string>;
  for (const [role, file] of Object.entries(assets)) {
    if (file.includes("/") || file.startsWith(".")) throw invalid(dir, `the manifest names ${file} for ${role}`);
    const expected = manifest.checksums?.[role];
    if (typeof expected !== "string") throw invalid(dir, `manifest.json has no checksum for ${role}`);
    const actual = await sha256File(path.join(dir, file)).catch(() => undefined);
    if (actual === undefined) throw invalid(dir, `${file} is missing or unreadable`);
    if (actual !== expected)
      throw invalid(dir, `${file} does not match its checksum in manifest.json (a partial copy?)`);
  }
  return manifest as Record<string, unknown>;
}

/** The id of an imported directory: its build's own id when it has one, else one from its checksums. */
async function importedId(dir: string, manifest: Record<string, unknown>): Promise<string> {
  try {
    const inputs = JSON.parse(await readFile(path.join(dir, "inputs.json"), "utf8")) as { key?: unknown };
    if (typeof inputs.key === "string" && ID_PATTERN.test(inputs.key)) return inputs.key;
  } catch {
    // not one of ours
  }
  return createHash("sha256").update(JSON.stringify(manifest.checksums)).digest("hex").slice(0, 24);
}

/** `image import DIR NAME`: validates `dir`, copies it into the cache and names it. */
export async function importImage(root: string, dir: string, name: string): Promise<ImageSummary> {
  assertImageName(name);
  const source = path.resolve(dir);
  const manifest = await validateAssetsDir(source);
  const id = await importedId(source, manifest);
  const target = buildDir(root, id);
  if (!isComplete(target)) {
    const staging = path.join(root, `.tmp-import-${id}-${process.pid}-${Date.now()}`);
    await mkdir(root, { recursive: true });
    try {
      await cp(source, staging, { recursive: true, filter: (src) => !/\/(logs|\.tmp-[^/]*)$/.test(src) });
      await mkdir(path.dirname(target), { recursive: true });
      await rename(staging, target);
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
  }
  const record = await registerName(root, { name, id, source: "import", importedFrom: source });
  return summary(root, id, name, record.createdAt);
}
