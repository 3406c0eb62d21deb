// What goes into an image: the features `--with` names, extra Debian packages and a size, resolved
// into the builder's recipe. The resolved recipe is an input of the image id, so the same choices
// (in any order) give the same id.
import type { BuilderRecipe } from "../builder/index.mjs";
import { ImageError } from "./errors.js";

/** One feature of `image build --with`. */
export interface Feature {
  /** What it adds, for help and docs. */
  description: string;
  /** Debian packages it adds. */
  packages?: readonly string[];
  /** npm registry tools it unpacks into /usr/local. */
  npmTools?: readonly string[];
  /** Whether it links /usr/local/bin/fd to fdfind. */
  fdLink?: boolean;
}

/** Every feature, by name. */
export const FEATURES: Readonly<Record<string, Feature>> = {
  node: {
    description: "Node 24 with npm and node-gyp (headers included, nothing downloaded at build time in the guest)",
    npmTools: ["node", "npm"],
  },
  bun: { description: "bun (the baseline build, which runs on any CPU model)", npmTools: ["bun"] },
  "build-essential": { description: "make and g++ for native builds", packages: ["make", "g++"] },
  "python-dev": { description: "python3-dev, pip and venv", packages: ["python3-dev", "python3-pip", "python3-venv"] },
  fd: { description: "fd (Debian's fd-find, linked as fd)", packages: ["fd-find"], fdLink: true },
};

/** The features of `image build` without `--with`: the image the project's own tests boot. */
export const DEFAULT_FEATURES: readonly string[] = ["node", "bun", "build-essential", "fd"];

/** Debian package names as Debian's policy allows them. */
const PACKAGE_NAME = /^[a-z0-9][a-z0-9+.-]+$/;

/** Largest `--size` accepted, in GiB. */
export const MAX_SIZE_GIB = 64;

/** What a caller chooses for an image. */
export interface RecipeChoice {
  /** Feature names (default {@link DEFAULT_FEATURES}); an empty list gives the base image. */
  with?: readonly string[];
  /** More Debian packages. */
  packages?: readonly string[];
  /** Size of the root filesystem in GiB (default: the content plus headroom). */
  sizeGiB?: number;
}

/** The builder's recipe for `choice`; throws IMAGE_BAD_RECIPE for unknown features or bad values. */
export function resolveRecipe(choice: RecipeChoice = {}): BuilderRecipe {
  const features = [...new Set(choice.with ?? DEFAULT_FEATURES)].sort();
  const unknown = features.filter((name) => !Object.hasOwn(FEATURES, name));
  if (unknown.length > 0) {
    throw new ImageError("IMAGE_BAD_RECIPE", `unknown feature ${unknown.join(", ")}`, {
      hint: `Choose from ${Object.keys(FEATURES).join(", ")}; add any other Debian package with --packages.`,
      details: { unknown },
    });
  }
  const badPackages = (choice.packages ?? []).filter((name) => !PACKAGE_NAME.test(name));
  if (badPackages.length > 0) {
    throw new ImageError("IMAGE_BAD_RECIPE", `${badPackages.join(", ")} is not a Debian package name`, {
      hint: "Give Debian package names, lowercase, comma-separated: --packages jq,ripgrep",
      details: { packages: badPackages },
    });
  }
  const size = choice.sizeGiB;
  if (size !== undefined && !(Number.isInteger(size) && size >= 1 && size <= MAX_SIZE_GIB)) {
    throw new ImageError("IMAGE_BAD_RECIPE", `--size must be a whole number of GiB from 1 to ${MAX_SIZE_GIB}`, {
      hint: "Omit --size to fit the root filesystem to its content; instances grow their disk to diskGiB anyway.",
      details: { sizeGiB: size },
    });
  }
  const picked = features.map((name) => FEATURES[name]!);
  return {
    features,
    packages: [...new Set([...picked.flatMap((f) => f.packages ?? []), ...(choice.packages ?? [])])].sort(),
    npmTools: [...new Set(picked.flatMap((f) => f.npmTools ?? []))].sort(),
    fdLink: picked.some((f) => f.fdLink === true),
    sizeGiB: size ?? null,
  };
}
