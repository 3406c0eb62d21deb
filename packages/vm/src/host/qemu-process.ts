// QEMU process hygiene: the wrapper script (seccomp, parent-death signal, QMP), the pid record
// (which disk-lock.ts reads to reap a stray QEMU), and making sure a closed QEMU is gone.
import fsp from "node:fs/promises";
import path from "node:path";
import { shellQuote, writeFileAtomic } from "@pi-sandbox/config";
import { VmError } from "../errors.js";
import { findExecutable, qemuArchOf } from "./host-facts.js";
import { INCOMING_FD, INCOMING_MARKER, QEMU_PID_FILE, QMP_SOCKET } from "../filenames.js";
import { QEMU_SANDBOX_OPTIONS, probeQemuSeccomp } from "./qemu-seccomp.js";
import { TRANSFER_DISK_BYTES, TRANSFER_DISK_FILE, TRANSFER_DISK_ID, TRANSFER_DISK_SERIAL } from "./transfer-disk.js";
import { isAlive, processStartTime, waitFor, type ProcessIdentity } from "../process-util.js";

/**
 * The memory balloon the wrapper adds to every VM, with free page reporting: the guest kernel
 * tells QEMU which of its pages are free, and QEMU gives them back to the host. Without it a
 * guest's resident memory only grows (the initramfs freed at boot, a build's peak). A saved
 * memory state holds the device, so it is named in {@link WRAPPER_DEVICES}.
 */
export const BALLOON_DEVICE = {
  pci: "virtio-balloon-pci,free-page-reporting=on",
  mmio: "virtio-balloon-device,free-page-reporting=on",
} as const;

/**
 * The devices the wrapper adds to Gondolin's, as a saved memory state records them: the balloon,
 * and the transfer disk (transfer-disk.ts) when the run directory holds its file.
 * A state saved before the transfer disk existed names the balloon only, and resumes cold once.
 */
export const WRAPPER_DEVICES = `balloon(free-page-reporting),transfer-disk(${TRANSFER_DISK_BYTES / 1024 / 1024}MiB)`;

/** The QEMU binary to hand to Gondolin. */
export interface QemuLauncher {
  /** Path passed as `sandbox.qemuPath` (the wrapper when there is one). */
  qemuPath: string;
  /** The real emulator binary. */
  emulatorPath: string;
  /** Whether QEMU is killed by the kernel when its parent (this process) dies. */
  diesWithParent: boolean;
  /** Whether QEMU runs under its seccomp sandbox (`-sandbox on,…`, see `QEMU_SANDBOX_OPTIONS`). */
  seccomp: boolean;
  /** Why QEMU runs without the sandbox, in QEMU's words (when `seccomp` is false). */
  seccompProblem?: string;
  /** The devices the wrapper adds to Gondolin's ({@link WRAPPER_DEVICES}); none without a wrapper. */
  devices?: string;
}

/** The wrapper's first argument on its second run, under setpriv: the pid of the process that started it. */
const OWNER_ARG = "--pi-sandbox-owner=";

/**
 * Finds `qemu-system-<arch>` and generates a wrapper script in `binDir` that execs QEMU
 * - confined by QEMU's seccomp sandbox (`-sandbox on,obsolete=deny,elevateprivileges=deny,
 *   spawn=deny,resourcecontrol=deny`) when this QEMU and kernel support it (probed once per
 *   process; without it the wrapper still boots and `seccomp` is false);
 * - with `no_new_privs` and a parent-death signal where `setpriv` exists (Linux): if the owning
 *   Node process is SIGKILLed, the kernel kills QEMU too; an owner that died before the signal
 *   was set makes the wrapper exit instead of starting QEMU;
 * - with no core dumps (they would hold guest memory), umask 077, and the VM's run directory as
 *   its working directory (when Gondolin's socket paths are absolute);
 * - with a memory balloon that reports free guest pages ({@link BALLOON_DEVICE}) on the machine
 *   types Gondolin uses (q35, microvm, virt);
 * - with the transfer disk (transfer-disk.ts) as a second virtio-blk drive (PCI on q35, pc and
 *   virt; virtio-mmio on microvm, where the guest still finds the root drive at /dev/vda) when the
 *   run directory holds its file, named relative to the run directory (so no character of its
 *   path reaches QEMU's option parser);
 * - with a QMP socket (`qmp.sock`) next to Gondolin's control socket of the same VM (taken from
 *   the `virtiocon0` chardev argument), which Gondolin 0.12 only opens for its idle pause: boot
 *   watches it for the guest being paused on a full host disk;
 * - waiting for a saved guest state (`-incoming defer`, see `restoreMemory` in vm-memory.ts) when
 *   the run directory holds the marker file {@link INCOMING_MARKER}, with the saved memory file it
 *   names open on fd {@link INCOMING_FD} (/dev/null when it cannot be read: the load then fails
 *   and the boot goes cold), so QEMU reads the file itself instead of through this process.
 * The script's name keeps `x86_64`/`aarch64` because Gondolin derives the guest arch from the QEMU
 * path string.
 */
export async function prepareQemuLauncher(binDir: string, arch: string = process.arch): Promise<QemuLauncher> {
  const qemuArch = qemuArchOf(arch);
  const name = `qemu-system-${qemuArch}`;
  const emulatorPath = findExecutable(name);
  if (!emulatorPath) {
    throw new VmError("VM_QEMU_MISSING", `${name} is not installed or not on PATH`, {
      hint: "install QEMU (e.g. apt-get install qemu-system-x86 qemu-utils, or brew install qemu)",
      details: { tool: name },
    });
  }
  if (process.platform === "win32") {
    return {
      qemuPath: emulatorPath,
      emulatorPath,
      diesWithParent: false,
      seccomp: false,
      seccompProblem: "seccomp filters exist only on Linux (win32)",
    };
  }
  const setpriv = process.platform === "linux" ? findExecutable("setpriv") : undefined;
  await fsp.mkdir(binDir, { recursive: true, mode: 0o700 });
  const seccomp = await probeQemuSeccomp(emulatorPath, { cacheDir: binDir });
  // The parent-death signal comes first: the wrapper runs again under setpriv, told its owner's
  // pid in a first argument of its own, and checks that its parent is still that process. An owner
  // killed before the signal was set (while the shell started) would otherwise leave a QEMU that
  // nothing takes down. Left open: an owner that dies before the first run's shell has read its
  // parent (right after the spawn); the next start's reapStrayQemu takes that QEMU down.
  const ownerCheck = setpriv
    ? [
        'case "${1:-}" in',
        `  ${OWNER_ARG}*)`,
        `    if [ "$PPID" != "\${1#${OWNER_ARG}}" ]; then echo "qemu wrapper: the process that started QEMU is gone" >&2; exit 1; fi`,
        "    shift ;;",
        `  *) exec ${shellQuote(setpriv)} --pdeathsig KILL --no-new-privs "$0" "${OWNER_ARG}$PPID" "$@" ;;`,
        "esac",
      ]
    : [];
  const exec = [
    "exec",
    shellQuote(emulatorPath),
    ...(seccomp.supported ? [`-sandbox ${QEMU_SANDBOX_OPTIONS}`] : []),
    '"$@"',
  ].join(" ");
  const script = [
    "#!/bin/sh",
    "# Generated by @pi-sandbox/vm: QEMU confined by its seccomp sandbox (where supported), with",
    "# no_new_privs and SIGKILL when the process that started it dies (with setpriv), no core dumps,",
    "# its run dir as cwd, a QMP socket next to Gondolin's control socket (see qmp.ts), a memory",
    "# balloon with free page reporting, the transfer disk when its file is in the run dir, and",
    "# -incoming defer when the run dir holds the restore marker, the memory file it names on",
    `# fd ${INCOMING_FD} (see vm-memory.ts).`,
    ...ownerCheck,
    "run= balloon= xfer= prev=",
    'for arg in "$@"; do',
    '  case "$arg" in',
    '    socket,id=virtiocon0,path=*) p="${arg#socket,id=virtiocon0,path=}"; p="${p%%,*}"; run="${p%/*}" ;;',
    "  esac",
    '  if [ "$prev" = -machine ]; then',
    '    case "$arg" in',
    `      microvm*) balloon=${BALLOON_DEVICE.mmio}; xfer=virtio-blk-device ;;`,
    `      q35*|pc*|virt*) balloon=${BALLOON_DEVICE.pci}; xfer=virtio-blk-pci ;;`,
    "    esac",
    "  fi",
    '  prev="$arg"',
    "done",
    `if [ -n "$run" ]; then set -- "$@" -qmp "unix:$run/${QMP_SOCKET},server=on,wait=off"; fi`,
    `if [ -n "$run" ] && [ -n "$balloon" ]; then set -- "$@" -device "$balloon"; fi`,
    // Relative to the run dir, QEMU's cwd below (only an absolute run dir is entered).
    'case "$run" in /*) ;; *) xfer= ;; esac',
    `if [ -n "$xfer" ] && [ -f "$run/${TRANSFER_DISK_FILE}" ] && [ ! -L "$run/${TRANSFER_DISK_FILE}" ]; then`,
    `  set -- "$@" -drive "file=${TRANSFER_DISK_FILE},if=none,id=${TRANSFER_DISK_ID},format=raw,cache=writeback"`,
    `  set -- "$@" -device "$xfer,drive=${TRANSFER_DISK_ID},serial=${TRANSFER_DISK_SERIAL}"`,
    "fi",
    `if [ -n "$run" ] && [ -e "$run/${INCOMING_MARKER}" ]; then`,
    `  saved=$(cat "$run/${INCOMING_MARKER}")`,
    `  if [ -n "$saved" ] && [ -r "$saved" ]; then exec ${INCOMING_FD}<"$saved"; else exec ${INCOMING_FD}</dev/null; fi`,
    '  set -- "$@" -incoming defer',
    "fi",
    "ulimit -c 0",
    "umask 077",
    // Only an absolute run dir: relative paths among the arguments must keep resolving.
    'case "$run" in /*) cd "$run" || exit 1 ;; esac',
    exec,
    "",
  ].join("\n");
  await fsp.mkdir(binDir, { recursive: true, mode: 0o700 });
  const wrapper = path.join(binDir, `${name}-pdeathsig`);
  const existing = await fsp.readFile(wrapper, "utf8").catch(() => undefined);
  if (existing !== script) {
    // Atomic so that a concurrent boot never executes a half-written script.
    await writeFileAtomic(wrapper, script, 0o700);
  }
  return {
    qemuPath: wrapper,
    emulatorPath,
    diesWithParent: setpriv !== undefined,
    seccomp: seccomp.supported,
    devices: WRAPPER_DEVICES,
    ...(seccomp.problem !== undefined ? { seccompProblem: seccomp.problem } : {}),
  };
}

/** Contents of the QEMU pid record. */
export interface QemuPidRecord extends ProcessIdentity {
  /** The Node process that started it. */
  ownerPid: number;
  /** The disk directory (must appear in QEMU's command line for a reap). */
  dir: string;
}

/** Records the QEMU pid of a run so a later owner can reap it if it outlives us. */
export async function writeQemuPidRecord(dir: string, pid: number): Promise<void> {
  const startTime = processStartTime(pid);
  const record: QemuPidRecord = { pid, ownerPid: process.pid, dir, ...(startTime ? { startTime } : {}) };
  await writeFileAtomic(path.join(dir, QEMU_PID_FILE), JSON.stringify(record));
}

/** Removes the QEMU pid record. */
export async function removeQemuPidRecord(dir: string): Promise<void> {
  await fsp.rm(path.join(dir, QEMU_PID_FILE), { force: true });
}

/**
 * Waits for QEMU to be gone, SIGKILLing it if Gondolin's close gave up (it stops waiting after
 * 10 s): a layer must never be published, deleted or unlocked while a QEMU may still write it.
 */
export async function ensureQemuGone(pid: number | undefined): Promise<void> {
  if (pid === undefined) return;
  if (await waitFor(() => !isAlive({ pid }), 15_000)) return;
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // already gone
  }
  await waitFor(() => !isAlive({ pid }), 5_000);
}
