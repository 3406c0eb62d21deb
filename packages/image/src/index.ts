// @pi-sandbox/image: guest images for pi-sandbox, built from Debian packages into the user's
// cache and kept by name. The controller's `pi-sandbox image …` commands and `image: <name>` in
// sandbox.yaml use this API; e2e builds the project's test image with it.
export { buildImage, DEFAULT_IMAGE_NAME } from "./build.js";
export type { BuildImageOptions, BuildImageResult } from "./build.js";
export { ImageError, isImageError } from "./errors.js";
export type { ImageErrorCode } from "./errors.js";
export { DEFAULT_FEATURES, FEATURES, MAX_SIZE_GIB, resolveRecipe } from "./recipe.js";
export type { Feature, RecipeChoice } from "./recipe.js";
export { checkHostTools, checkRoot } from "./host-tools.js";
export {
  assertImageName,
  imageCacheRoot,
  imageDir,
  importImage,
  inspectImage,
  listImages,
  removeImage,
  resolveImageRef,
  validateAssetsDir,
} from "./store.js";
export type { ImageDetails, ImageSummary, NameRecord } from "./store.js";
export type { BuilderRecipe } from "../builder/index.mjs";
