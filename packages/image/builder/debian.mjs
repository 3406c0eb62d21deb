// Debian packages fetched with apt: the kernel (with its modules) and busybox-static.
import { mkdir, readdir } from "node:fs/promises";
import path from "node:path";
import { log, run } from "./proc.mjs";

/** `apt-get download name=version` into `dir`, then unpack it into `into`; return the .deb path. */
export async function downloadAndExtract(name, version, dir, into, logFile) {
  await mkdir(dir, { recursive: true });
  // Downloading as root into a root-owned directory: tell apt not to switch to its _apt user.
  await run("apt-get", ["download", "-q", "-o", "APT::Sandbox::User=root", `${name}=${version}`], {
    cwd: dir,
    logFile,
    capture: false,
  });
  const deb = (await readdir(dir)).find((f) => f.startsWith(`${name}_`) && f.endsWith(".deb"));
  if (!deb) throw new Error(`apt-get download ${name}=${version} produced no .deb in ${dir}`);
  await run("dpkg-deb", ["-x", path.join(dir, deb), into], { logFile });
  return path.join(dir, deb);
}

/**
 * Unpack the kernel package into `<work>/kernel` and index its modules.
 * @returns {Promise<{root: string, vmlinuz: string, modulesDir: string}>}
 */
export async function fetchKernel(work, kernel, logFile) {
  log(`downloading ${kernel.name} ${kernel.version}`);
  const debs = path.join(work, "debs");
  const root = path.join(work, "kernel");
  await downloadAndExtract(kernel.name, kernel.version, debs, root, logFile);
  await run("depmod", ["-b", root, kernel.kernelRelease], { logFile });
  return {
    root,
    vmlinuz: path.join(root, "boot", `vmlinuz-${kernel.kernelRelease}`),
    modulesDir: path.join(root, "lib", "modules", kernel.kernelRelease),
  };
}

/** Unpack busybox-static and return the path of its static binary. */
export async function fetchBusybox(work, version, logFile) {
  log(`downloading busybox-static ${version}`);
  const root = path.join(work, "busybox");
  await downloadAndExtract("busybox-static", version, path.join(work, "debs"), root, logFile);
  return path.join(root, "bin", "busybox");
}
