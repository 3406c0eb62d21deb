// The initramfs: busybox-static, the virtio/fuse modules the Debian kernel builds as modules, a
// udhcpc script, and Gondolin's initramfs /init with the virtio transports loaded first.
import { chmod, copyFile, mkdir, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { INITRAMFS_MODULES, SOURCE_DATE_EPOCH } from "./config.mjs";
import { gondolinDir } from "./inputs.mjs";
import { normalizeMtimes } from "./normalize.mjs";
import { log, run } from "./proc.mjs";

/** Gondolin's embedded init scripts (dist/src/alpine/init-scripts.js), imported by file path. */
export async function gondolinInitScripts() {
  const file = path.join(gondolinDir(), "dist", "src", "alpine", "init-scripts.js");
  const mod = await import(pathToFileURL(file).href);
  if (typeof mod.INITRAMFS_INIT_SCRIPT !== "string" || typeof mod.ROOTFS_INIT_SCRIPT !== "string") {
    throw new Error(
      `${file} no longer exports INITRAMFS_INIT_SCRIPT/ROOTFS_INIT_SCRIPT; update @pi-sandbox/image builder/`,
    );
  }
  return { initramfs: mod.INITRAMFS_INIT_SCRIPT, rootfs: mod.ROOTFS_INIT_SCRIPT };
}

/** Replace `search` in `text` exactly once, or fail loudly when Gondolin's script has changed. */
export function replaceOnce(text, search, replacement, what) {
  const count = text.split(search).length - 1;
  if (count !== 1) {
    throw new Error(`expected one occurrence of ${what}, found ${count}; update @pi-sandbox/image builder/`);
  }
  return text.replace(search, () => replacement);
}

/** Gondolin's initramfs init plus the virtio transport modules Debian kernels need. */
export function initramfsInit(script) {
  const anchor = "modprobe virtio_blk > /dev/null 2>&1 || true\n";
  return replaceOnce(
    script,
    anchor,
    "modprobe virtio_pci > /dev/null 2>&1 || true\nmodprobe virtio_mmio > /dev/null 2>&1 || true\n" + anchor,
    "the virtio_blk modprobe in Gondolin's init script",
  );
}

/** DHCP client hook for busybox udhcpc, using busybox `ip`. */
export const UDHCPC_SCRIPT = `#!/bin/sh
# udhcpc hook: configure the interface, default route and resolver from the lease.
case "$1" in
  deconfig)
    ip -4 addr flush dev "$interface"
    ip link set "$interface" up
    ;;
  bound|renew)
    ip -4 addr flush dev "$interface"
    ip -4 addr add "$ip/\${mask:-24}" dev "$interface"
    for gw in $router; do
      ip -4 route replace default via "$gw" dev "$interface"
      break
    done
    : > /etc/resolv.conf
    for ns in $dns; do
      echo "nameserver $ns" >> /etc/resolv.conf
    done
    ;;
esac
exit 0
`;

/** Copy each module and its dependencies (as modprobe resolves them) into the initramfs tree. */
async function copyModules(kernel, kernelRelease, root) {
  const wanted = new Set();
  for (const name of INITRAMFS_MODULES) {
    const out = await run("modprobe", ["-d", kernel.root, "-S", kernelRelease, "--show-depends", name]);
    for (const line of out.split("\n")) {
      const m = /^insmod (\S+)/.exec(line);
      if (m) wanted.add(m[1]);
    }
  }
  const destBase = path.join(root, "lib", "modules", kernelRelease);
  for (const file of [...wanted].sort()) {
    const rel = path.relative(kernel.modulesDir, file);
    if (rel.startsWith("..")) throw new Error(`module ${file} is outside ${kernel.modulesDir}`);
    await mkdir(path.dirname(path.join(destBase, rel)), { recursive: true });
    await copyFile(file, path.join(destBase, rel));
  }
  for (const meta of ["modules.order", "modules.builtin", "modules.builtin.modinfo"]) {
    await copyFile(path.join(kernel.modulesDir, meta), path.join(destBase, meta));
  }
  await run("depmod", ["-b", root, kernelRelease]);
  return wanted.size;
}

/** Build `initramfs.cpio.lz4` at `outFile` (legacy lz4 framing, which the kernel requires). */
export async function buildInitramfs({ work, kernel, kernelRelease, busybox, initScript, outFile }) {
  log("assembling the initramfs");
  const root = path.join(work, "initramfs");
  for (const d of [
    "bin",
    "sbin",
    "usr/bin",
    "usr/sbin",
    "usr/share/udhcpc",
    "etc",
    "proc",
    "sys",
    "dev",
    "run",
    "tmp",
    "newroot",
  ]) {
    await mkdir(path.join(root, d), { recursive: true });
  }
  await copyFile(busybox, path.join(root, "bin", "busybox"));
  await chmod(path.join(root, "bin", "busybox"), 0o755);
  const applets = (await run(busybox, ["--list-full"])).split("\n").filter(Boolean).sort();
  for (const applet of applets) {
    const dest = path.join(root, applet);
    if (applet === "bin/busybox") continue;
    await mkdir(path.dirname(dest), { recursive: true });
    await symlink(path.relative(path.dirname(dest), path.join(root, "bin", "busybox")), dest).catch((err) => {
      if (err.code !== "EEXIST") throw err;
    });
  }
  const moduleCount = await copyModules(kernel, kernelRelease, root);
  await writeFile(path.join(root, "usr", "share", "udhcpc", "default.script"), UDHCPC_SCRIPT, { mode: 0o755 });
  await writeFile(path.join(root, "init"), initramfsInit(initScript), { mode: 0o755 });
  await normalizeMtimes(root);
  const cpioCmd =
    "find . -mindepth 1 -print0 | LC_ALL=C sort -z | " +
    "cpio --null --create --format=newc --owner=0:0 --reproducible --quiet | lz4 -l -9 -q -c > " +
    JSON.stringify(outFile);
  await run("bash", ["-c", `set -o pipefail; ${cpioCmd}`], {
    cwd: root,
    env: { ...process.env, SOURCE_DATE_EPOCH: String(SOURCE_DATE_EPOCH) },
  });
  log(`initramfs: ${applets.length} busybox applets, ${moduleCount} modules`);
}
