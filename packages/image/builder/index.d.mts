// Types of the builder's surface (index.mjs) for the package's TypeScript side.

/** A resolved recipe: what src/recipe.ts makes of `--with`, `--packages` and `--size`. */
export interface BuilderRecipe {
  /** Feature names, sorted. */
  features: string[];
  /** Debian packages on top of BASE_PACKAGES, sorted. */
  packages: string[];
  /** npm registry tools to unpack into /usr/local (keys of NPM_TOOLS), sorted. */
  npmTools: string[];
  /** Link /usr/local/bin/fd to Debian's fdfind. */
  fdLink: boolean;
  /** Size of rootfs.ext4 in GiB; null sizes it to the content plus headroom. */
  sizeGiB: number | null;
}

/** Build or reuse the image of `recipe` under `root`. */
export function ensureImage(options: {
  root: string;
  recipe: BuilderRecipe;
  rebuild?: boolean;
  prune?: { keep: Set<string> };
  preflight?: () => Promise<void>;
}): Promise<{ dir: string; id: string; reused: boolean }>;
/** True when `dir` holds a finished image. */
export function isComplete(dir: string): boolean;
/** The cache root for `env`. */
export function cacheRoot(env?: NodeJS.ProcessEnv): string;
/** `<root>/builds/<id>`. */
export function buildDir(root: string, id: string): string;
/** Delete a directory, unmounting what an interrupted build left mounted inside it first. */
export function removeBuildDir(dir: string): Promise<void>;
/** Packages every image has. */
export const BASE_PACKAGES: readonly string[];
/** npm registry tools by name. */
export const NPM_TOOLS: Record<string, { spec: string; integrity: string }>;
/** The Debian release. */
export const SUITE: string;
/** Our changes to Gondolin's guest helper sources: each `search` text occurs once in `file`. */
export const GUEST_SOURCE_PATCHES: readonly { file: string; search: string; replacement: string; what: string }[];
/** Applies GUEST_SOURCE_PATCHES to a copy of Gondolin's `dist/guest` at `guestDir`; throws when one does not apply once. */
export function applyGuestPatches(guestDir: string): Promise<void>;
/** Gondolin's embedded init scripts: the initramfs's /init and the rootfs's /init. */
export function gondolinInitScripts(): Promise<{ initramfs: string; rootfs: string }>;
/** Gondolin's rootfs /init with our changes (see builder/rootfs.mjs); throws when one does not apply once. */
export function rootfsInit(script: string): string;
/** The installed `@earendil-works/gondolin` package directory. */
export function gondolinDir(): string;
/** The Zig release that compiles Gondolin's helpers. */
export const ZIG_VERSION: string;
/** Asset file names by role. */
export const ASSET_FILES: { kernel: string; initramfs: string; rootfs: string };
/** Where progress lines go: each message with the seconds since start, padded. */
export function setLogSink(fn: (message: string, seconds: string) => void): void;
