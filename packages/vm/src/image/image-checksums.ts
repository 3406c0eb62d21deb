// Guest image files checked against their manifest's sha256 once, and the result remembered by
// (device, inode, size, mtime) in one file under the state root, so later boots pay a stat.
import fsp from "node:fs/promises";
import path from "node:path";
import { sha256File, writeJsonAtomic } from "@pi-sandbox/config";
import { imageChecksumsFile } from "../filenames.js";
import { invalidImage, type AssetRole } from "./image-assets.js";

/** One file to check: its role, its real path and the sha256 its manifest gives. */
export interface AssetChecksum {
  /** Which asset it is, for the error. */
  role: AssetRole;
  /** The file's real path. */
  path: string;
  /** The manifest's sha256, lowercase hex. */
  expected: string;
}

/** Options of {@link verifyAssetChecksums}. */
export interface ChecksumOptions {
  /** The image directory (real path), for the error. */
  dir: string;
  /** The manifest the checksums come from, named in the error. */
  manifestPath: string;
  /** Where the cache lives ({@link imageChecksumsFile}); without one every call hashes. */
  stateRoot?: string;
  /** Hashes a file (default `sha256File`); a seam for tests that count hashes. */
  hash?: (file: string) => Promise<string>;
}

/** One cached hash; the key (`dev:ino`) is the entry's name in {@link CacheFile.files}. */
interface CacheEntry {
  /** File size in bytes, as a decimal string. */
  size: string;
  /** Modification time in ns, as a decimal string. */
  mtimeNs: string;
  /** The content's sha256, lowercase hex. */
  sha256: string;
  /** When it was hashed, ISO time (the oldest entries go first when the file is full). */
  hashedAt: string;
}

interface CacheFile {
  version: 1;
  files: Record<string, CacheEntry>;
}

/** Entries kept: a few images' worth; one rebuilt in place replaces its files' entries (same inode) or adds new ones. */
const MAX_ENTRIES = 64;

async function readCache(file: string): Promise<CacheFile> {
  try {
    const raw = JSON.parse(await fsp.readFile(file, "utf8")) as Partial<CacheFile>;
    if (raw.version === 1 && typeof raw.files === "object" && raw.files !== null) {
      return { version: 1, files: raw.files };
    }
  } catch {
    // missing or damaged: it only saves work, so start afresh
  }
  return { version: 1, files: {} };
}

async function identity(file: string): Promise<{ key: string; size: string; mtimeNs: string }> {
  const stat = await fsp.stat(file, { bigint: true });
  return { key: `${stat.dev}:${stat.ino}`, size: String(stat.size), mtimeNs: String(stat.mtimeNs) };
}

/**
 * Checks each file against its manifest's sha256; a mismatch is VM_IMAGE_INVALID naming the
 * file and the manifest. A file whose device, inode, size and mtime match a cached entry is not
 * read again. The cache is a hint, not a proof: whoever can rewrite a file and set its mtime back
 * can also rewrite the manifest beside it, so the checksums catch damage (a partial copy), and
 * the containment checks in image-assets.ts are what keep host files out of a guest.
 */
export async function verifyAssetChecksums(assets: readonly AssetChecksum[], options: ChecksumOptions): Promise<void> {
  const cacheFile = options.stateRoot === undefined ? undefined : imageChecksumsFile(options.stateRoot);
  const cache = cacheFile ? await readCache(cacheFile) : { version: 1 as const, files: {} };
  const hash = options.hash ?? ((file: string) => sha256File(file));
  let changed = false;
  let mismatch: AssetChecksum | undefined;
  let actualOfMismatch = "";
  for (const asset of assets) {
    const before = await identity(asset.path);
    const cached = cache.files[before.key];
    let actual: string;
    if (cached && cached.size === before.size && cached.mtimeNs === before.mtimeNs) {
      actual = cached.sha256;
    } else {
      actual = await hash(asset.path);
      // A file that changed while it was read is hashed again next time rather than remembered
      // with a hash of half old, half new content.
      const after = await identity(asset.path);
      if (after.key === before.key && after.size === before.size && after.mtimeNs === before.mtimeNs) {
        cache.files[before.key] = {
          size: before.size,
          mtimeNs: before.mtimeNs,
          sha256: actual,
          hashedAt: new Date().toISOString(),
        };
        changed = true;
      }
    }
    if (actual !== asset.expected) {
      mismatch = asset;
      actualOfMismatch = actual;
      break;
    }
  }
  if (changed && cacheFile) await saveCache(cacheFile, cache);
  if (mismatch) {
    throw invalidImage(
      options.dir,
      `the guest image file ${mismatch.path} (${mismatch.role}) does not match its sha256 in ${options.manifestPath}`,
      "the image is damaged, incomplete (a partial copy?) or was changed after it was built: copy or build it again (`pi-sandbox image build`)",
      {
        role: mismatch.role,
        path: mismatch.path,
        manifest: options.manifestPath,
        expected: mismatch.expected,
        actual: actualOfMismatch,
      },
    );
  }
}

/**
 * Writes the cache, newest entries first up to {@link MAX_ENTRIES}. Two daemons saving at once
 * each replace the file whole (atomically), so one's new entries may be lost: that costs one more
 * hash later, never a wrong answer. A failed write (read-only or full state root) is ignored for
 * the same reason.
 */
async function saveCache(file: string, cache: CacheFile): Promise<void> {
  const kept = Object.entries(cache.files)
    .sort(([, a], [, b]) => b.hashedAt.localeCompare(a.hashedAt))
    .slice(0, MAX_ENTRIES);
  try {
    await fsp.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
    await writeJsonAtomic(file, { version: 1, files: Object.fromEntries(kept) } satisfies CacheFile);
  } catch {
    // see above: the cache only saves work
  }
}
