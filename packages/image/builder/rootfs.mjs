// The root filesystem: Debian minbase from debootstrap plus the packages tests need, Gondolin's
// helpers and a patched copy of Gondolin's rootfs /init, packed as a journaled ext4 image.
import { existsSync } from "node:fs";
import { chmod, copyFile, cp, mkdir, readdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import {
  DEBIAN_MIRROR,
  GUEST_HELPERS,
  GUEST_HOSTNAME,
  ROOTFS_HASH_SEED,
  ROOTFS_HEADROOM_BYTES,
  ROOTFS_HEADROOM_FRACTION,
  ROOTFS_LABEL,
  ROOTFS_UUID,
  SOURCE_DATE_EPOCH,
  SUITE,
} from "./config.mjs";
import { replaceOnce } from "./initramfs.mjs";
import { normalizeMtimes } from "./normalize.mjs";
import { NODE_GYP_CACHE } from "./npm-tools.mjs";
import { log, run } from "./proc.mjs";

/**
 * Gondolin's rootfs /init, changed for persistent dev environments:
 * - /root stays on the root disk (Gondolin mounts a tmpfs there);
 * - no debug listings of /dev and the virtio ports on every boot;
 * - no second DHCP round when the initramfs already configured eth0;
 * - rngd only when it exists (Debian's minbase has none; the kernel seeds itself from virtio-rng);
 * - the MITM CA goes into the system bundle without running Debian's update-ca-certificates,
 *   whose per-certificate work took over a minute of every boot under TCG;
 * - a restart skips rebuilding the system bundle when it already holds this disk's MITM CA (the
 *   CA is made once per disk): the bundle, `openssl x509 -hash` and `find` cost about 1.1 s of
 *   every boot under TCG;
 * - a modprobe of a module the initramfs already loaded is skipped (a process each, ~70 ms);
 * - the memory balloon's driver is loaded, so free guest pages go back to the host (the host's
 *   QEMU adds the device with free page reporting);
 * - node-gyp's header cache ($XDG_CACHE_HOME/node-gyp, on the /tmp tmpfs) links to the one in the
 *   image, so native builds never download Node's headers from nodejs.org (unreachable);
 * - the pi-sandbox guest agent's daemon starts at boot when the host asks for the one the disk
 *   holds (AGENT_AT_BOOT), once the environment it passes on to commands and services is set.
 */
export function rootfsInit(script) {
  let s = script;
  s = replaceOnce(
    s,
    "setup_mitm_ca() {\n",
    `${FAST_CA_UPDATE}\nsetup_mitm_ca() {\n`,
    "setup_mitm_ca in Gondolin's init script",
  );
  s = replaceOnce(
    s,
    "if update-ca-certificates > /dev/null 2>&1; then",
    "if fast_update_ca_certificates > /dev/null 2>&1; then",
    "the update-ca-certificates call in Gondolin's init script",
  );
  s = replaceOnce(
    s,
    '    if cp "${mitm_ca_cert}" "${mitm_ca_install}" 2>/dev/null; then\n',
    SAME_CA_SKIP,
    "the MITM CA copy in Gondolin's init script",
  );
  s = replaceOnce(s, "\nlog() {\n", `\n${LOADED_MODPROBE}\nlog() {\n`, "the log function in Gondolin's init script");
  s = replaceOnce(
    s,
    'mount -t tmpfs tmpfs /root || log "[init] mount tmpfs /root failed"\n',
    "",
    "the /root tmpfs mount in Gondolin's init script",
  );
  const debugStart = s.indexOf('log "[init] /dev entries:"\n');
  const debugEnd = s.indexOf("if modprobe virtio_console > /dev/null 2>&1; then");
  if (debugStart < 0 || debugEnd < debugStart) {
    throw new Error(
      "could not find the debug listing block in Gondolin's rootfs init; update @pi-sandbox/image builder/",
    );
  }
  s = s.slice(0, debugStart) + s.slice(debugEnd);
  s = replaceOnce(
    s,
    "if command -v udhcpc > /dev/null 2>&1; then\n",
    "if command -v udhcpc > /dev/null 2>&1 && ! ip -4 addr show dev eth0 2>/dev/null | grep -q 'inet '; then\n",
    "the udhcpc block in Gondolin's init script",
  );
  s = replaceOnce(
    s,
    "export XDG_CACHE_HOME=/tmp/.cache\n",
    `export XDG_CACHE_HOME=/tmp/.cache\nln -sfn ${NODE_GYP_CACHE} /tmp/.cache/node-gyp 2>/dev/null || true\n`,
    "the XDG_CACHE_HOME export in Gondolin's init script",
  );
  s = replaceOnce(
    s,
    "if modprobe virtio_net > /dev/null 2>&1; then\n",
    "modprobe virtio_balloon > /dev/null 2>&1 || true\nif modprobe virtio_net > /dev/null 2>&1; then\n",
    "the virtio_net modprobe in Gondolin's init script",
  );
  s = replaceOnce(
    s,
    "if [ -e /dev/hwrng ]; then\n",
    "if [ -e /dev/hwrng ] && command -v rngd > /dev/null 2>&1; then\n",
    "the rngd start in Gondolin's init script",
  );
  s = replaceOnce(
    s,
    "\nsetup_mitm_ca\n\nif [ -x /usr/bin/sandboxssh ]; then\n",
    `\nsetup_mitm_ca\n\n${AGENT_AT_BOOT}\nif [ -x /usr/bin/sandboxssh ]; then\n`,
    "the setup_mitm_ca call in Gondolin's init script",
  );
  return s;
}

/**
 * The guest agent's daemon, started next to the rest of the boot instead of by the host's first
 * exec after it: the agent leaves a script at its state dir's side (`<state dir>.boot`) and the
 * host puts the key of the agent it wants on the kernel command line (`pi_sandbox.agent=KEY`). The
 * script starts the daemon only for its own key (see the supervisor's agent, boot.py). It runs
 * after setup_mitm_ca, whose CA variables the daemon's commands and services inherit, and in the
 * background: nothing else of the boot waits for it.
 *
 * A disk's first boot has no agent yet: there the host shares a seed read-only (AGENT_SEED, the
 * supervisor's writeAgentSeed), an archive and a script that installs it and starts the daemon,
 * under the same key. The FUSE binds are up by now (setup_mitm_ca reads one).
 */
const AGENT_BOOT_SCRIPT = "/var/lib/pi-sandbox-agent.boot";
const AGENT_SEED_SCRIPT = "/run/pi-sandbox-agent-seed/first-boot";
const AGENT_AT_BOOT = `for arg in $(cat /proc/cmdline); do
  case "\${arg}" in
    pi_sandbox.agent=*)
      for agent_script in ${AGENT_BOOT_SCRIPT} ${AGENT_SEED_SCRIPT}; do
        if [ -r "\${agent_script}" ]; then
          log "[init] starting the pi-sandbox agent (\${agent_script})"
          /bin/sh "\${agent_script}" "\${arg#pi_sandbox.agent=}" < /dev/null > /dev/null 2>&1 &
          break
        fi
      done
      ;;
  esac
done
`;

/**
 * The bundle is current when the installed copy of the MITM CA is this boot's CA and the bundle
 * was written after it (Debian's own update-ca-certificates, run by an upgrade of its package,
 * also includes the local copy).
 */
const SAME_CA_SKIP = `    if cmp -s "\${mitm_ca_cert}" "\${mitm_ca_install}" && [ /etc/ssl/certs/ca-certificates.crt -nt "\${mitm_ca_install}" ]; then
      system_ca_bundle="/etc/ssl/certs/ca-certificates.crt"
    elif cp "\${mitm_ca_cert}" "\${mitm_ca_install}" 2>/dev/null; then
`;

/** Every `modprobe X` of the script: nothing when the module is already loaded. */
const LOADED_MODPROBE = `modprobe() {
  [ -d "/sys/module/$1" ] || command modprobe "$@"
}
`;

/**
 * What Debian's update-ca-certificates produces for the bundle, in a handful of processes: the
 * certificates enabled in /etc/ca-certificates.conf plus the local ones, and a hash link per
 * local certificate for OpenSSL's CApath lookups (Python's ssl module uses those).
 */
const FAST_CA_UPDATE = `fast_update_ca_certificates() {
  bundle=/etc/ssl/certs/ca-certificates.crt
  (
    cd /usr/share/ca-certificates || exit 1
    grep -v -e '^#' -e '^!' -e '^$' /etc/ca-certificates.conf | xargs -r cat || exit 1
    for local_cert in /usr/local/share/ca-certificates/*.crt; do
      [ -r "\${local_cert}" ] || continue
      cat "\${local_cert}"
      echo
    done
  ) > "\${bundle}.new" || return 1
  mv "\${bundle}.new" "\${bundle}"
  if command -v openssl > /dev/null 2>&1; then
    find /etc/ssl/certs -maxdepth 1 -lname '/usr/local/share/ca-certificates/*' -delete 2>/dev/null || true
    for local_cert in /usr/local/share/ca-certificates/*.crt; do
      [ -r "\${local_cert}" ] || continue
      cert_hash="$(openssl x509 -hash -noout -in "\${local_cert}" 2>/dev/null)" || continue
      ln -sf "\${local_cert}" "/etc/ssl/certs/\${cert_hash}.0"
    done
  fi
  return 0
}
`;

/** debootstrap minbase + `packages` into `<work>/rootfs`. */
export async function debootstrap(work, packages, logFile) {
  const root = path.join(work, "rootfs");
  log(`debootstrap ${SUITE} (minbase + ${packages.length} packages; about 2-3 min)`);
  await run(
    "debootstrap",
    ["--variant=minbase", `--include=${packages.join(",")}`, "--merged-usr", SUITE, root, DEBIAN_MIRROR],
    {
      logFile,
      capture: false,
      env: {
        ...process.env,
        SOURCE_DATE_EPOCH: String(SOURCE_DATE_EPOCH),
        DEBIAN_FRONTEND: "noninteractive",
        LC_ALL: "C",
      },
    },
  );
  return root;
}

async function removeMatching(dir, predicate) {
  if (!existsSync(dir)) return;
  for (const name of await readdir(dir))
    if (predicate(name)) await rm(path.join(dir, name), { recursive: true, force: true });
}

/** Normalise the shadow files' "last changed" day, which passwd stamps with today's date. */
async function normalizeShadow(root) {
  const day = String(Math.floor(SOURCE_DATE_EPOCH / 86400));
  for (const name of ["shadow", "shadow-"]) {
    const file = path.join(root, "etc", name);
    if (!existsSync(file)) continue;
    const lines = (await readFile(file, "utf8")).split("\n").map((line) => {
      const f = line.split(":");
      if (f.length >= 3 && f[2] !== "") f[2] = day;
      return f.join(":");
    });
    await writeFile(file, lines.join("\n"));
  }
}

/** Add Gondolin's pieces and the kernel modules, and strip machine-specific and volatile files. */
export async function customizeRootfs({ root, helpersDir, kernel, kernelRelease, initScript, fdLink }) {
  log("customising the root filesystem");
  await writeFile(path.join(root, "init"), rootfsInit(initScript), { mode: 0o755 });
  for (const name of GUEST_HELPERS) {
    await copyFile(path.join(helpersDir, name), path.join(root, "usr", "bin", name));
    await chmod(path.join(root, "usr", "bin", name), 0o755);
  }
  const modulesDest = path.join(root, "lib", "modules", kernelRelease);
  await rm(modulesDest, { recursive: true, force: true });
  await mkdir(path.dirname(modulesDest), { recursive: true });
  await cp(kernel.modulesDir, modulesDest, { recursive: true, verbatimSymlinks: true });
  // The package's build/source links point at headers we do not ship.
  for (const link of ["build", "source"]) await rm(path.join(modulesDest, link), { force: true });
  await run("depmod", ["-b", root, kernelRelease]);

  // Debian's udhcpc ships its hook in /etc/udhcpc; Gondolin's init looks in /usr/share/udhcpc.
  await mkdir(path.join(root, "usr", "share", "udhcpc"), { recursive: true });
  await rm(path.join(root, "usr", "share", "udhcpc", "default.script"), { force: true });
  await symlink("/etc/udhcpc/default.script", path.join(root, "usr", "share", "udhcpc", "default.script"));
  await rm(path.join(root, "usr", "bin", "python"), { force: true });
  await symlink("python3", path.join(root, "usr", "bin", "python"));
  if (fdLink) {
    // Debian names fd's binary fdfind; `fd` is what people type.
    await mkdir(path.join(root, "usr", "local", "bin"), { recursive: true });
    await rm(path.join(root, "usr", "local", "bin", "fd"), { force: true });
    await symlink("/usr/bin/fdfind", path.join(root, "usr", "local", "bin", "fd"));
  }

  await writeFile(path.join(root, "etc", "hostname"), `${GUEST_HOSTNAME}\n`);
  await writeFile(
    path.join(root, "etc", "hosts"),
    `127.0.0.1\tlocalhost\n127.0.1.1\t${GUEST_HOSTNAME}\n::1\tlocalhost ip6-localhost ip6-loopback\n`,
  );
  // The initramfs copies the resolver from its DHCP lease over this at every boot.
  await writeFile(path.join(root, "etc", "resolv.conf"), "nameserver 192.168.127.1\n");
  await writeFile(
    path.join(root, "etc", "apt", "sources.list"),
    [
      `deb ${DEBIAN_MIRROR} ${SUITE} main`,
      `deb ${DEBIAN_MIRROR} ${SUITE}-updates main`,
      `deb http://deb.debian.org/debian-security ${SUITE}-security main`,
      "",
    ].join("\n"),
  );

  // sshd host keys are generated at boot by `ssh-keygen -A` (Gondolin's enableSsh); never ship one.
  await removeMatching(path.join(root, "etc", "ssh"), (n) => n.startsWith("ssh_host_"));
  // Machine identity and volatile state.
  await writeFile(path.join(root, "etc", "machine-id"), "");
  await rm(path.join(root, "var", "lib", "dbus", "machine-id"), { force: true });
  await removeMatching(path.join(root, "var", "log"), () => true);
  await removeMatching(path.join(root, "var", "cache", "apt"), () => true);
  await removeMatching(path.join(root, "var", "lib", "apt", "lists"), (n) => n !== "partial" && n !== "auxfiles");
  await removeMatching(path.join(root, "var", "cache", "debconf"), (n) => n.endsWith("-old"));
  await removeMatching(path.join(root, "var", "lib", "dpkg"), (n) => n.endsWith("-old"));
  await removeMatching(path.join(root, "tmp"), () => true);
  await removeMatching(path.join(root, "var", "tmp"), () => true);
  await rm(path.join(root, "var", "cache", "ldconfig", "aux-cache"), { force: true });
  await run("find", [root, "-xdev", "-depth", "-name", "__pycache__", "-type", "d", "-exec", "rm", "-rf", "{}", ";"]);
  await compilePython(root);
  await normalizeShadow(root);
  await normalizeMtimes(root);
}

// Run by the root filesystem's own python3 (chroot): compiles the directories of its sys.path under
// /usr/lib (the standard library, dist-packages). Hash-checked .pyc files do not depend on
// timestamps, and a fixed hash seed and one worker make their bytes the same on every build. The
// interpreter runs with -B and the compile is forced: otherwise the modules this script imports
// itself (re, enum, functools, collections, encodings…) kept the timestamp .pyc files its own
// imports wrote, which the mtimes set after it made stale, so every new disk's first Python start
// compiled them again (about 0.8 s of the guest agent's first start under TCG).
// Modules that do not compile (test data written for Python 2) are skipped, as Debian's py3compile
// skips them.
const COMPILE_PYTHON = `import compileall, os, py_compile, re, sys
dirs = [d for d in sys.path if d.startswith("/usr/lib/") and os.path.isdir(d) and not d.endswith("lib-dynload")]
skip = re.compile(r"/(tests?|idle_test)/")
mode = py_compile.PycInvalidationMode.CHECKED_HASH
ok = [compileall.compile_dir(d, quiet=2, rx=skip, workers=1, invalidation_mode=mode, force=True) for d in dirs]
print("compiled", " ".join(dirs), "" if all(ok) else "(some modules skipped)")
`;

/**
 * Byte-compiles the guest's Python modules into the image. Without them every new instance's first
 * Python programs compile what they import, in the guest: under software emulation (TCG) the guest
 * agent's imports alone took 5 s more on its first start than on its second.
 */
async function compilePython(root) {
  if (!existsSync(path.join(root, "usr", "bin", "python3"))) return;
  log("byte-compiling the guest's Python modules");
  const out = await run("chroot", [root, "/usr/bin/python3", "-B", "-c", COMPILE_PYTHON], {
    // Only what the compile needs: none of the host's PYTHON* variables reach the guest's python3.
    env: { PATH: process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin", PYTHONHASHSEED: "0", LC_ALL: "C" },
  });
  log(out.trim());
}

/** Bytes used by the tree, as mke2fs will need them (4 KiB blocks, rounded per file). */
async function treeBytes(root) {
  const out = await run("du", ["-s", "-x", "--block-size=1", root]);
  return Number(out.split(/\s/)[0]);
}

/**
 * Pack the tree into a journaled ext4 image with room to spare (or exactly `sizeGiB` when given);
 * resize2fs can grow it later.
 */
export async function makeExt4({ root, outFile, logFile, sizeGiB }) {
  const content = await treeBytes(root);
  const mib = 1024 * 1024;
  const needed = Math.ceil((content * (1 + ROOTFS_HEADROOM_FRACTION) + ROOTFS_HEADROOM_BYTES) / mib) * mib;
  const size = sizeGiB ? sizeGiB * 1024 * mib : needed;
  if (size < needed) {
    const err = new Error(
      `the files need a ${Math.ceil(needed / mib)} MiB root filesystem, more than --size ${sizeGiB} GiB`,
    );
    err.code = "SIZE_TOO_SMALL";
    err.neededGiB = Math.ceil(needed / (1024 * mib));
    throw err;
  }
  log(
    `writing rootfs.ext4: ${(content / mib).toFixed(0)} MiB of files in a ${(size / mib).toFixed(0)} MiB journaled ext4`,
  );
  await run(
    "mke2fs",
    [
      "-q",
      "-F",
      "-t",
      "ext4",
      "-d",
      root,
      "-L",
      ROOTFS_LABEL,
      "-U",
      ROOTFS_UUID,
      "-m",
      "0",
      "-b",
      "4096",
      "-E",
      `lazy_itable_init=0,lazy_journal_init=0,hash_seed=${ROOTFS_HASH_SEED}`,
      outFile,
      `${size / 1024}k`,
    ],
    {
      logFile,
      env: {
        ...process.env,
        E2FSPROGS_FAKE_TIME: String(SOURCE_DATE_EPOCH),
        SOURCE_DATE_EPOCH: String(SOURCE_DATE_EPOCH),
      },
    },
  );
  await pinInodeTimes(outFile, logFile);
  await run("e2fsck", ["-fn", outFile], { logFile });
}

/** Inode numbers in use, read from the per-group free-inode lists of dumpe2fs. */
export function usedInodes(dumpe2fsOutput) {
  const perGroup = Number(/^Inodes per group:\s+(\d+)/m.exec(dumpe2fsOutput)?.[1]);
  const groups = [...dumpe2fsOutput.matchAll(/^ {2}Free inodes: ?(.*)$/gm)].map((m) => m[1].trim());
  if (!perGroup || groups.length === 0) throw new Error("could not read the inode bitmap summary from dumpe2fs");
  const used = [];
  groups.forEach((list, group) => {
    const free = new Set();
    for (const range of list
      .split(",")
      .map((r) => r.trim())
      .filter(Boolean)) {
      const [a, b] = range.split("-").map(Number);
      for (let i = a; i <= (b ?? a); i += 1) free.add(i);
    }
    for (let i = group * perGroup + 1; i <= (group + 1) * perGroup; i += 1) if (!free.has(i)) used.push(i);
  });
  return used;
}

/**
 * mke2fs -d copies each file's ctime, which is the time of this build (touch cannot set it), and
 * its atime, which reading the tree (du, mke2fs itself) bumps on directories under relatime.
 * Pin both to SOURCE_DATE_EPOCH for every used inode so identical inputs give identical bytes.
 */
async function pinInodeTimes(image, logFile) {
  const dump = await run("dumpe2fs", [image], { logFile });
  const scriptFile = path.join(path.dirname(logFile), "pin-ctime.debugfs");
  const lines = usedInodes(dump).flatMap((ino) => [
    `sif <${ino}> ctime @${SOURCE_DATE_EPOCH}`,
    `sif <${ino}> atime @${SOURCE_DATE_EPOCH}`,
  ]);
  await writeFile(scriptFile, `${lines.join("\n")}\n`);
  await run("debugfs", ["-w", "-f", scriptFile, image], {
    capture: false,
    logFile,
    env: { ...process.env, E2FSPROGS_FAKE_TIME: String(SOURCE_DATE_EPOCH) },
  });
}
