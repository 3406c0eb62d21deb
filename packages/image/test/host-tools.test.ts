// Before a build starts: a host without debootstrap or apt, or a user who is not root, is told at
// once what is missing and what to do instead (install it, or build elsewhere and import).
import { mkdtemp, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { checkHostTools, checkRoot, isImageError, resolveRecipe } from "../src/index.js";
import { onPath } from "../src/host-tools.js";

let bin: string;
beforeEach(async () => {
  bin = await mkdtemp(path.join(tmpdir(), "image-bin-"));
});
afterEach(() => rm(bin, { recursive: true, force: true }));

/** A PATH holding only links to the host's own copies of `commands`. */
async function pathWith(commands: string[]): Promise<string> {
  for (const command of commands) {
    const real = await onPath(command, process.env);
    if (!real) throw new Error(`this test needs ${command} on the host`);
    await symlink(real, path.join(bin, command));
  }
  return bin;
}

async function failure(promise: Promise<unknown>): Promise<{ code: string; message: string; hint: string }> {
  try {
    await promise;
  } catch (error) {
    if (!isImageError(error)) throw error;
    return { code: error.code, message: error.message, hint: error.hint ?? "" };
  }
  throw new Error("expected an ImageError");
}

test("without debootstrap the build fails at once, naming it and the command that installs it", async () => {
  const PATH = await pathWith(["apt-get", "apt-cache", "dpkg-deb", "dpkg-query"]);
  const error = await failure(checkHostTools(resolveRecipe(), path.join(bin, "cache"), { PATH }));
  expect(error.code).toBe("IMAGE_TOOL_MISSING");
  expect(error.message).toMatch(/^debootstrap is not installed/);
  expect(error.hint).toBe("Install it: sudo apt-get install debootstrap");
});

test("without apt the hint says to build on a Debian machine and import the result", async () => {
  const error = await failure(checkHostTools(resolveRecipe(), path.join(bin, "cache"), { PATH: bin }));
  expect(error.code).toBe("IMAGE_TOOL_MISSING");
  expect(error.message).toMatch(/^apt-get is not installed/);
  expect(error.hint).toContain("pi-sandbox image import DIR NAME");
});

test("a user who is not root is told to build as root or on another machine and import", () => {
  try {
    checkRoot(1000);
    throw new Error("expected a refusal");
  } catch (error) {
    expect(isImageError(error) && error.code).toBe("IMAGE_NEEDS_ROOT");
    expect((error as Error & { hint: string }).hint).toMatch(
      /sudo .*pi-sandbox image build.*pi-sandbox image import DIR NAME/,
    );
  }
});

test("root passes the root check", () => {
  expect(() => checkRoot(0)).not.toThrow();
});
