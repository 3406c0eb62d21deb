// `image build`: resolve the recipe, reuse a cached build of the same inputs (offline, no root),
// or check the host and build; then point the name at the build.
import { ensureImage, setLogSink, type BuilderRecipe } from "../builder/index.mjs";
import { ImageError, isImageError } from "./errors.js";
import { checkHostTools, checkRoot } from "./host-tools.js";
import { resolveRecipe, type RecipeChoice } from "./recipe.js";
import { assertImageName, imageCacheRoot, namedIds, registerName } from "./store.js";

/** The name `image build` gives when none is given. */
export const DEFAULT_IMAGE_NAME = "default";

/** Options of {@link buildImage}. */
export interface BuildImageOptions extends RecipeChoice {
  /** The name to give the image (default {@link DEFAULT_IMAGE_NAME}). */
  name?: string;
  /** Environment: `XDG_CACHE_HOME` places the cache, `PATH` finds the host tools. */
  env?: NodeJS.ProcessEnv;
  /** Build again even when the cache has these inputs. */
  rebuild?: boolean;
  /** Each progress line with the seconds since the build started (default: stderr). */
  onProgress?: (message: string, seconds: string) => void;
  /** After a build, delete unnamed builds over a day old beyond the three newest (test images). */
  prune?: boolean;
}

/** What {@link buildImage} resolves with. */
export interface BuildImageResult {
  /** The image's name. */
  name: string;
  /** Its id: a hash of every input, so the same inputs give the same id. */
  id: string;
  /** The assets directory (give it to Gondolin, or name the image in sandbox.yaml). */
  dir: string;
  /** True when a cached build was reused and nothing was built. */
  reused: boolean;
  /** The resolved recipe. */
  recipe: BuilderRecipe;
}

/** The builder's plain errors as coded ones. */
function asImageError(error: unknown): ImageError {
  if (isImageError(error)) return error;
  const e = error as Error & { code?: string; packages?: string[]; neededGiB?: number };
  if (e.code === "UNKNOWN_PACKAGE") {
    return new ImageError("IMAGE_BAD_RECIPE", e.message, {
      hint: "Check the names with `apt-cache search`; after `sudo apt-get update` newer packages are known.",
      details: { packages: e.packages },
    });
  }
  if (e.code === "SIZE_TOO_SMALL") {
    return new ImageError("IMAGE_BAD_RECIPE", e.message, {
      hint: `Give --size ${e.neededGiB} or more, or omit --size.`,
      details: { neededGiB: e.neededGiB },
    });
  }
  return new ImageError("IMAGE_BUILD_FAILED", `the image build failed: ${e.message}`, {
    hint: "The lines above show the failing step's log. Fix the cause and run the build again: nothing half-built is kept.",
    cause: error,
  });
}

/**
 * Builds (or reuses) the image `options` describe in the user's cache and names it. A second
 * build with the same inputs does nothing and needs neither the network nor root.
 */
export async function buildImage(options: BuildImageOptions = {}): Promise<BuildImageResult> {
  const name = options.name ?? DEFAULT_IMAGE_NAME;
  assertImageName(name);
  const recipe = resolveRecipe(options);
  const env = options.env ?? process.env;
  const root = imageCacheRoot(env);
  if (options.onProgress) setLogSink(options.onProgress);
  try {
    const built = await ensureImage({
      root,
      recipe,
      rebuild: options.rebuild === true,
      ...(options.prune ? { prune: { keep: await namedIds(root) } } : {}),
      preflight: async () => {
        await checkHostTools(recipe, root, env);
        checkRoot();
      },
    });
    await registerName(root, { name, id: built.id, source: "build" });
    return { name, id: built.id, dir: built.dir, reused: built.reused, recipe };
  } catch (error) {
    throw asImageError(error);
  }
}
