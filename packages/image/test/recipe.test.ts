// What `image build --with/--packages/--size` resolves to: the default features, the same recipe
// (so the same image id) for the same choices in any order, and unknown or unsafe choices refused.
import { DEFAULT_FEATURES, FEATURES, isImageError, resolveRecipe } from "../src/index.js";

test("without choices the recipe is the default features: Node, bun, make and g++, fd", () => {
  const recipe = resolveRecipe();
  expect(recipe.features).toEqual([...DEFAULT_FEATURES].sort());
  expect(recipe.npmTools).toEqual(["bun", "node", "npm"]);
  expect(recipe.packages).toEqual(["fd-find", "g++", "make"]);
  expect(recipe.fdLink).toBe(true);
  expect(recipe.sizeGiB).toBeNull();
});

test("the same choices in another order give the same recipe, so the same image id", () => {
  const a = resolveRecipe({ with: ["node", "python-dev"], packages: ["jq", "ripgrep"] });
  const b = resolveRecipe({ with: ["python-dev", "node", "node"], packages: ["ripgrep", "jq"] });
  expect(JSON.stringify(a)).toBe(JSON.stringify(b));
});

test("an empty feature list gives the base image: no npm tools, no extra packages", () => {
  expect(resolveRecipe({ with: [] })).toEqual({
    features: [],
    packages: [],
    npmTools: [],
    fdLink: false,
    sizeGiB: null,
  });
});

test("python-dev adds pip, venv and the headers", () => {
  expect(resolveRecipe({ with: ["python-dev"] }).packages).toEqual(["python3-dev", "python3-pip", "python3-venv"]);
});

test("an unknown feature is refused with IMAGE_BAD_RECIPE naming it and every known one", () => {
  try {
    resolveRecipe({ with: ["node", "rust"] });
    throw new Error("expected a refusal");
  } catch (error) {
    expect(isImageError(error) && error.code).toBe("IMAGE_BAD_RECIPE");
    expect((error as Error).message).toContain("rust");
    for (const name of Object.keys(FEATURES)) expect((error as { hint: string }).hint).toContain(name);
  }
});

test.each([["Bad Name"], ["-x"], ["a;rm"]])("the package name %s is refused", (name) => {
  expect(() => resolveRecipe({ packages: [name] })).toThrow(/not a Debian package name/);
});

test.each([0, 65, 1.5])("--size %s is refused", (sizeGiB) => {
  expect(() => resolveRecipe({ sizeGiB })).toThrow(/--size must be a whole number of GiB/);
});
