// The host tools a build needs, each with the Debian package that provides it, checked before a
// build starts so a missing one fails at once with the command that installs it.
import { constants, existsSync } from "node:fs";
import { access } from "node:fs/promises";
import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import type { BuilderRecipe } from "../builder/index.mjs";
import { ZIG_VERSION } from "../builder/index.mjs";
import { ImageError } from "./errors.js";

const run = promisify(execFile);

/** One tool on PATH and the package that installs it. */
interface HostTool {
  command: string;
  debianPackage: string;
  neededFor: string;
}

const APT_TOOLS: readonly HostTool[] = [
  { command: "apt-get", debianPackage: "apt", neededFor: "the kernel and busybox packages" },
  { command: "apt-cache", debianPackage: "apt", neededFor: "the package versions the image id hashes" },
  { command: "dpkg-deb", debianPackage: "dpkg", neededFor: "unpacking the kernel" },
  { command: "dpkg-query", debianPackage: "dpkg", neededFor: "the package list" },
];

const BUILD_TOOLS: readonly HostTool[] = [
  { command: "debootstrap", debianPackage: "debootstrap", neededFor: "the root filesystem" },
  { command: "mke2fs", debianPackage: "e2fsprogs", neededFor: "rootfs.ext4" },
  { command: "debugfs", debianPackage: "e2fsprogs", neededFor: "reproducible rootfs.ext4 timestamps" },
  { command: "e2fsck", debianPackage: "e2fsprogs", neededFor: "checking rootfs.ext4" },
  { command: "dumpe2fs", debianPackage: "e2fsprogs", neededFor: "reproducible rootfs.ext4 timestamps" },
  { command: "cpio", debianPackage: "cpio", neededFor: "the initramfs" },
  { command: "lz4", debianPackage: "lz4", neededFor: "the initramfs" },
  { command: "depmod", debianPackage: "kmod", neededFor: "the kernel modules" },
  { command: "modprobe", debianPackage: "kmod", neededFor: "the initramfs modules" },
  { command: "flock", debianPackage: "util-linux", neededFor: "the cache lock" },
];

/** Absolute path of `command` on `env`'s PATH, or undefined. */
export async function onPath(command: string, env: NodeJS.ProcessEnv): Promise<string | undefined> {
  for (const dir of (env.PATH ?? "").split(path.delimiter).filter(Boolean)) {
    const candidate = path.join(dir, command);
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

function missingTool(tool: HostTool, install: string): ImageError {
  return new ImageError(
    "IMAGE_TOOL_MISSING",
    `${tool.command} is not installed; the image build needs it for ${tool.neededFor}`,
    {
      hint: `Install it: ${install}`,
      details: { tool: tool.command, package: tool.debianPackage, install },
    },
  );
}

/** What the host must have to build `recipe` into `root`, short of root itself. */
export async function checkHostTools(
  recipe: BuilderRecipe,
  root: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<void> {
  for (const tool of APT_TOOLS) {
    if (!(await onPath(tool.command, env))) {
      throw new ImageError(
        "IMAGE_TOOL_MISSING",
        `${tool.command} is not installed: images are built from Debian packages with apt`,
        {
          hint: "Build on a Debian or Ubuntu machine (`pi-sandbox image build`), copy the directory it prints here and run `pi-sandbox image import DIR NAME`.",
          details: { tool: tool.command, package: tool.debianPackage },
        },
      );
    }
  }
  for (const tool of BUILD_TOOLS) {
    if (!(await onPath(tool.command, env))) throw missingTool(tool, `sudo apt-get install ${tool.debianPackage}`);
  }
  if (recipe.npmTools.length > 0 && !(await onPath("npm", env))) {
    throw missingTool(
      { command: "npm", debianPackage: "npm", neededFor: "fetching Node, npm and bun from the npm registry" },
      "sudo apt-get install npm (or use the npm that came with your Node)",
    );
  }
  await checkZigInstaller(root, env);
}

/** Zig comes from PyPI through `python3 -m pip`, unless an earlier build cached it. */
async function checkZigInstaller(root: string, env: NodeJS.ProcessEnv): Promise<void> {
  if (existsSync(path.join(root, `zig-${ZIG_VERSION}`, "ziglang", "zig"))) return;
  const python = { command: "python3", debianPackage: "python3", neededFor: "installing Zig from PyPI" };
  if (!(await onPath("python3", env))) throw missingTool(python, "sudo apt-get install python3 python3-pip");
  try {
    await run("python3", ["-m", "pip", "--version"], { env, timeout: 30_000 });
  } catch {
    throw missingTool(
      {
        command: "python3 -m pip",
        debianPackage: "python3-pip",
        neededFor: `installing Zig ${ZIG_VERSION} from PyPI (ziglang), which compiles Gondolin's guest helpers`,
      },
      "sudo apt-get install python3-pip",
    );
  }
}

/** debootstrap and chroot need root; throws IMAGE_NEEDS_ROOT otherwise. */
export function checkRoot(uid: number | undefined = process.getuid?.()): void {
  if (uid === 0) return;
  throw new ImageError("IMAGE_NEEDS_ROOT", "building an image needs root (debootstrap and chroot)", {
    hint:
      'Run the build as root with your cache: sudo env "PATH=$PATH" "XDG_CACHE_HOME=${XDG_CACHE_HOME:-$HOME/.cache}" pi-sandbox image build …; ' +
      "or build on another Linux machine where you are root and copy the directory over: pi-sandbox image import DIR NAME.",
    details: { uid },
  });
}
