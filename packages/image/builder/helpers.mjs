// Gondolin's guest helpers, compiled with Zig from the sources inside the npm package.
import { existsSync } from "node:fs";
import { chmod, cp, mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { GUEST_HELPERS, GUEST_SOURCE_PATCHES, ZIG_BUILD_FLAGS, ZIG_VERSION } from "./config.mjs";
import { replaceOnce } from "./initramfs.mjs";
import { makeBuildDir, publish, removeBuildDir } from "./cache.mjs";
import { gondolinDir } from "./inputs.mjs";
import { log, run } from "./proc.mjs";

/** Install Zig from PyPI's `ziglang` wheel into the cache (never globally); return the zig binary. */
export async function ensureZig(root) {
  const dir = path.join(root, `zig-${ZIG_VERSION}`);
  const zig = path.join(dir, "ziglang", "zig");
  if (existsSync(zig)) return zig;
  log(`installing Zig ${ZIG_VERSION} from PyPI (ziglang) into ${dir}`);
  const tmp = await makeBuildDir(root, `zig-${ZIG_VERSION}`);
  try {
    const target = path.join(tmp, "pkg");
    await run(
      "python3",
      [
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--target",
        target,
        `ziglang==${ZIG_VERSION}`,
      ],
      { logFile: path.join(tmp, "pip.log") },
    ).catch((err) => {
      throw new Error(
        `could not install ziglang==${ZIG_VERSION} with "python3 -m pip" (${err.message}). ` +
          "Install pip (apt-get install python3-pip) and make sure PyPI is reachable.",
        { cause: err },
      );
    });
    await publish(target, dir);
  } finally {
    await removeBuildDir(tmp);
  }
  return zig;
}

/** Applies GUEST_SOURCE_PATCHES to a copy of Gondolin's `dist/guest` at `guestDir`. */
export async function applyGuestPatches(guestDir) {
  for (const { file, search, replacement, what } of GUEST_SOURCE_PATCHES) {
    const target = path.join(guestDir, file);
    await writeFile(target, replaceOnce(await readFile(target, "utf8"), search, replacement, what));
  }
}

/**
 * Build sandboxd, sandboxfs, sandboxssh and sandboxingress once per key and return the directory
 * holding them. Cached separately from images, so a root filesystem change does not rebuild them.
 */
export async function ensureHelpers(root, key) {
  const dir = path.join(root, "helpers", key);
  if (GUEST_HELPERS.every((name) => existsSync(path.join(dir, name)))) return dir;
  const zig = await ensureZig(root);
  log(`compiling guest helpers with Zig ${ZIG_VERSION} (about 1.5 min on 2 cores)`);
  const tmp = await makeBuildDir(root, `helpers-${key}`);
  try {
    const src = path.join(tmp, "guest");
    await cp(path.join(gondolinDir(), "dist", "guest"), src, { recursive: true });
    await run("chmod", ["-R", "u+w", src]);
    await applyGuestPatches(src);
    await run(
      zig,
      [
        "build",
        ...ZIG_BUILD_FLAGS,
        "--cache-dir",
        path.join(tmp, "zig-cache"),
        "--global-cache-dir",
        path.join(tmp, "zig-global-cache"),
      ],
      { cwd: src, logFile: path.join(tmp, "zig.log") },
    );
    const out = path.join(tmp, "out");
    await mkdir(out);
    for (const name of GUEST_HELPERS) {
      await cp(path.join(src, "zig-out", "bin", name), path.join(out, name));
      await chmod(path.join(out, name), 0o755);
    }
    await mkdir(path.dirname(dir), { recursive: true });
    await publish(out, dir);
    log(`guest helpers ready in ${dir}`);
  } finally {
    await removeBuildDir(tmp);
  }
  return dir;
}
