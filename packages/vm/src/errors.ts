// The vm package's coded error and its codes.
import { defineCodedError, messageOf, type CodedErrorOptions } from "@pi-sandbox/config";

/** Stable codes of every error this package raises. Callers switch on these. */
export type VmErrorCode =
  /** The guest image directory (or one of its kernel/initramfs/rootfs files) is missing or unreadable. */
  | "VM_IMAGE_NOT_FOUND"
  /** The image file a disk was created from changed since; the disk cannot be booted safely. */
  | "VM_IMAGE_CHANGED"
  /**
   * The guest image is present but refused (`details.role`, `details.path`, `details.problem`): a
   * kernel, initramfs, rootfs or manifest that resolves (through `../` or symlinks) outside the
   * image directory, a file that does not match the manifest's sha256, a qcow2 rootfs with a
   * backing or external data file, a malformed manifest.
   */
  | "VM_IMAGE_INVALID"
  /** The guest image lacks a tool an operation needs (`details.tool`: resize2fs, sshd, sandboxssh, ...). */
  | "VM_IMAGE_MISSING_TOOL"
  /**
   * More CPUs, memory or disk than the host can honour, or a value outside the allowed range
   * (also a `network.hostPorts` entry that is not a unique port 1-65535).
   */
  | "VM_RESOURCES_UNSUPPORTED"
  /** Another process (or VM) holds the disk. */
  | "VM_DISK_BUSY"
  /** No disk exists in the given directory (or, for `removeSetAside`, no set-aside layer of that name). */
  | "VM_DISK_NOT_FOUND"
  /** A disk already exists where a new one was to be created. */
  | "VM_DISK_EXISTS"
  /** The disk's files are damaged or inconsistent (pointer names a missing layer, bad qcow2, ...). */
  | "VM_DISK_CORRUPT"
  /** A disk operation (qemu-img, file system) failed for another reason. */
  | "VM_DISK_FAILED"
  /** `qemu-system-*` or `qemu-img` is not installed or not on PATH. */
  | "VM_QEMU_MISSING"
  /** QEMU started but the guest did not get ready in time. */
  | "VM_START_TIMEOUT"
  /** QEMU or the guest failed while booting. */
  | "VM_START_FAILED"
  /** QEMU stopped the guest on a KVM internal error (a boot retries on TCG; seen only when that fails too). */
  | "VM_KVM_FAILED"
  /**
   * The host file system under a disk is full (`details.mountPoint`, `details.freeBytes`): QEMU
   * paused the guest on a write, or a stop/start/disk operation ran out of space. Free space there.
   */
  | "VM_HOST_DISK_FULL"
  /** The stop (or a live checkpoint) could not write a new checkpoint; the previous one is still current. */
  | "VM_CHECKPOINT_FAILED"
  /**
   * A live checkpoint was refused: the run already added the most layers one run keeps
   * (`details.live`); its writes stay in the run, and the stop merges the layers.
   */
  | "VM_CHECKPOINT_LIMIT"
  /** No kept checkpoint of a disk has that id (`details.id`), or the id is not one (12 hex digits). */
  | "VM_CHECKPOINT_NOT_FOUND"
  /**
   * A suspend could not save the guest's memory (`details.reason`); `details.diskSaved` says
   * whether the disk checkpoint was still taken (the VM is closed either way).
   */
  | "VM_SUSPEND_FAILED"
  /**
   * QEMU could not load a saved memory state; `startVm` answers it with a cold boot of the same
   * checkpoint (see `RunningVm.restore`), so callers of `startVm` never see it.
   */
  | "VM_RESTORE_FAILED"
  /** The VM is closed (or exited by itself); nothing more can run in it. */
  | "VM_CLOSED"
  /** A guest command could not be run (the guest refused or lost it). */
  | "VM_EXEC_FAILED"
  /** A guest file could not be found. */
  | "VM_FILE_NOT_FOUND"
  /** A guest file read or write failed for another reason. */
  | "VM_FILE_FAILED"
  /** Nothing accepted the TCP connection on the guest port (refused or timed out). */
  | "VM_TCP_CONNECT_FAILED"
  /** An open guest TCP stream was cut by Gondolin's channel while the VM kept running. */
  | "VM_TCP_STREAM_LOST"
  /** SSH access could not be enabled. */
  | "VM_SSH_FAILED"
  /** The operation is not available on this implementation (e.g. SSH on the local fake). */
  | "VM_UNSUPPORTED"
  /** Gondolin's internals this package relies on changed shape; pin the supported Gondolin version. */
  | "VM_GONDOLIN_INCOMPATIBLE"
  /**
   * A secret cannot be given to the VM as asked (`details.secret` names it, never its value): a
   * bad name, an empty value or one with a line break or NUL, a placeholder that equals or
   * overlaps another, an unknown name to update.
   */
  | "VM_SECRET_INVALID"
  /** A mount cannot be made: the host path is not an absolute, existing directory, or the guest path is not absolute. */
  | "VM_MOUNT_INVALID"
  /** A `kernelArgs` entry is not one `module.name=value` word (see {@link StartVmOptions}). */
  | "VM_KERNEL_ARG_INVALID";

/** Options of a {@link VmError}: `hint`, `details` and `cause`. */
export type VmErrorOptions = CodedErrorOptions;

const kind = defineCodedError<VmErrorCode, "VmError">("VmError", "VM_");

/** The one error class of `@pi-sandbox/vm`; switch on `code`, show `hint` to the user. */
export class VmError extends kind.Base {}

/** True for a {@link VmError}, also one from another installed copy of this package. */
export const isVmError: (value: unknown, code?: VmErrorCode) => value is VmError = kind.is;

/** The message of any thrown value. */
export { messageOf };
