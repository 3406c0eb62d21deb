// Every file and directory name the vm package gives on disk: in a disk directory, in a VM's
// socket directory and under its state root (as Lima's filenames.go). No other module writes one.
import { randomBytes } from "node:crypto";
import path from "node:path";

// In a disk directory (an instance's or a template's `disk/`)

/** The pointer file naming a disk's current layer chain. Replaced atomically; never edited in place. */
export const POINTER_FILE = "disk.json";
/** The disk's lock: the owner's pid, start time and purpose. */
export const LOCK_FILE = "lock.json";
/** The record of the QEMU running this disk (pid, owner, start time), for reaping a stray one. */
export const QEMU_PID_FILE = "qemu.pid.json";
/** The record of a saved memory state (absent: nothing saved). */
export const SUSPEND_STATE_FILE = "suspend.json";
/** QEMU's migration stream of the guest, next to {@link SUSPEND_STATE_FILE}. */
export const MEMORY_FILE = "memory.bin";
/**
 * The record of the run in progress: the layer QEMU writes and the checkpoint it was opened on.
 * Present from before QEMU starts until the run is checkpointed or discarded; found by a later
 * open, it names a run whose owner died, which that open recovers (disk-recovery.ts).
 */
export const RUN_RECORD_FILE = "run.json";
/**
 * Where an interrupted run's layer goes when it cannot be used (it is moved, never deleted), with
 * a note beside it ({@link setAsideNoteName}). Orphan cleanup never looks inside; destroy removes it.
 */
export const SET_ASIDE_DIR = "set-aside";
/** A qcow2 layer's name. */
export const LAYER_PATTERN = /^layer-[0-9a-f]{16}\.qcow2$/;
/** Prefix of temp files; a leftover one is debris, except a lock attempt's (see {@link LOCK_TEMP_PREFIX}). */
export const TEMP_PREFIX = ".tmp-";
/** Prefix of a lock attempt's temp file, removed by its owner. */
export const LOCK_TEMP_PREFIX = ".tmp-lock-";

/** Prefix of a dead owner's lock moved aside before it is removed. */
export const STALE_LOCK_PREFIX = ".stale-lock-";

/**
 * Where Gondolin's MITM CA (for guest HTTPS egress) lives: one per disk. A CA shared by the whole
 * state root was created by whichever first boots raced to it, and a guest could end up trusting
 * a CA whose key another boot had just replaced. Per disk, the disk lock serialises its creation.
 */
export function gondolinCertDir(diskDir: string): string {
  return path.join(diskDir, "mitm-ca");
}

/** A new layer's file name, matching {@link LAYER_PATTERN}. */
export function newLayerName(): string {
  return `layer-${randomBytes(8).toString("hex")}.qcow2`;
}

/** The note beside a set-aside layer in {@link SET_ASIDE_DIR}: why, when, and its last write. */
export function setAsideNoteName(layer: string): string {
  return `${layer}.json`;
}

/** The temp file a lock attempt writes before linking it into place as {@link LOCK_FILE}. */
export function lockTempName(token: string): string {
  return `${LOCK_TEMP_PREFIX}${token}`;
}

/** The name a dead owner's lock is moved aside to (attempt `attempt` of the taker `token`). */
export function staleLockName(token: string, attempt: number): string {
  return `${STALE_LOCK_PREFIX}${token}-${attempt}`;
}

/** The temp file a suspend writes the guest's memory to before renaming it to {@link MEMORY_FILE} (an orphan if the suspend dies). */
export function memoryTempName(): string {
  return `${TEMP_PREFIX}memory-${randomBytes(4).toString("hex")}`;
}

// In a VM's socket directory (`<stateRoot>/run/<id>/`, or `$TMPDIR/pisb-*` for a long state root)

/** Gondolin's control channel. */
export const CONTROL_SOCKET = "ctl.sock";
/** Gondolin's virtio-fs channel. */
export const FS_SOCKET = "fs.sock";
/** Gondolin's SSH channel. */
export const SSH_SOCKET = "ssh.sock";
/** Gondolin's ingress channel. */
export const INGRESS_SOCKET = "ing.sock";
/** Gondolin's network backend. */
export const NET_SOCKET = "net.sock";
/** QEMU's QMP monitor, next to Gondolin's control socket (the QEMU wrapper adds it). */
export const QMP_SOCKET = "qmp.sock";
/** The socket QEMU streams a suspend's memory to. */
export const MIGRATE_SOCKET = "mig.sock";
/**
 * A file in the socket directory that makes the wrapper start QEMU waiting for a saved state
 * (`-incoming defer`); it holds the saved memory file's path, which the wrapper opens as
 * {@link INCOMING_FD} for QEMU to read itself.
 */
export const INCOMING_MARKER = "incoming";
/** The fd on which QEMU finds the saved memory to load (`migrate-incoming fd:3`). */
export const INCOMING_FD = 3;
/** The longest socket name above: a socket directory must leave room for it within the path limit. */
export const LONGEST_SOCKET_NAME = [
  CONTROL_SOCKET,
  FS_SOCKET,
  SSH_SOCKET,
  INGRESS_SOCKET,
  NET_SOCKET,
  QMP_SOCKET,
  MIGRATE_SOCKET,
].reduce((a, b) => (b.length > a.length ? b : a));
/** Prefix of a socket directory under the shared temp dir. */
export const TMP_SOCKET_DIR_PREFIX = "pisb-";

// Under the state root

/** Parent of the VMs' socket directories. */
export function socketDirsRoot(stateRoot: string): string {
  return path.join(stateRoot, "run");
}

/** The QEMU wrapper scripts. */
export function launcherDir(stateRoot: string): string {
  return path.join(stateRoot, "bin");
}

/** Gondolin's session registry. */
export function gondolinSessionsDir(stateRoot: string): string {
  return path.join(stateRoot, "gondolin", "sessions");
}

/** One small JSON file per KVM verdict key. */
export function kvmVerdictsDir(stateRoot: string): string {
  return path.join(stateRoot, "kvm-verdicts");
}

/**
 * The sha256 of each guest image file already hashed, keyed by (device, inode, size, mtime): one
 * small JSON file, replaced atomically, so a boot in any daemon process skips hashing a file that
 * has not changed since (image-checksums.ts).
 */
export function imageChecksumsFile(stateRoot: string): string {
  return path.join(stateRoot, "image-checksums.json");
}
