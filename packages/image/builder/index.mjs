// What the package's TypeScript side (src/) uses of the builder. The builder stays plain ESM
// JavaScript shipped as written, so the text the image id hashes is the same in a checkout and in
// an installed tarball; index.d.mts types this surface.
export { ensureImage, isComplete } from "./build.mjs";
export { buildDir, cacheRoot, removeBuildDir } from "./cache.mjs";
export { BASE_PACKAGES, GUEST_SOURCE_PATCHES, NPM_TOOLS, SUITE, ZIG_VERSION } from "./config.mjs";
export { applyGuestPatches } from "./helpers.mjs";
export { gondolinInitScripts } from "./initramfs.mjs";
export { gondolinDir } from "./inputs.mjs";
export { ASSET_FILES } from "./manifest.mjs";
export { setLogSink } from "./proc.mjs";
export { rootfsInit } from "./rootfs.mjs";
