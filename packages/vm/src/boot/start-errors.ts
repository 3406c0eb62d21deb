// A start's failures as typed errors: what Gondolin and QEMU report when a boot fails, mapped to
// VmError codes, and the fault of a guest that QEMU paused on a failed disk request.
import { VmError, isVmError, messageOf } from "../errors.js";
import { hostDiskFullError, isNoSpaceError } from "../host/host-disk.js";
import type { IoErrorPause } from "../host/qmp.js";

/** Turns Gondolin/QEMU start failures into typed errors; the raw text goes to details and cause. */
export function mapStartError(error: unknown, diskDir: string, name?: string): unknown {
  if (isNoSpaceError(error)) {
    return hostDiskFullError({ dir: diskDir, situation: "start", ...(name ? { name } : {}), cause: error });
  }
  if (isVmError(error)) return error;
  const message = messageOf(error);
  const code = (error as { code?: unknown }).code;
  const details = { diskDir, reason: message };
  if (code === "vm_start_timeout" || /startup timed out/.test(message)) {
    return new VmError(
      "VM_START_TIMEOUT",
      "the guest did not get ready in time; the host may be overloaded (software emulation is slow)",
      { hint: "retry, or raise the start timeout", cause: error, details },
    );
  }
  if (/Failed to get "?\w+"? lock|Is another process using the image/.test(message)) {
    return new VmError("VM_DISK_BUSY", `another QEMU is using the disk in ${diskDir}`, {
      hint: "stop that VM first",
      cause: error,
      details,
    });
  }
  if (code === "ENOENT" && /qemu/i.test(message)) {
    return new VmError("VM_QEMU_MISSING", "QEMU could not be executed", {
      hint: "install qemu-system for this architecture",
      cause: error,
      details,
    });
  }
  const missing = /Could not open '([^']+)': No such file or directory/.exec(message);
  if (missing) {
    return new VmError("VM_IMAGE_NOT_FOUND", `QEMU could not open ${missing[1]}`, {
      hint: "restore it or recreate the instance",
      cause: error,
      details: { ...details, path: missing[1] },
    });
  }
  return new VmError("VM_START_FAILED", `the VM failed to boot: ${firstLine(message)}`, { cause: error, details });
}

function firstLine(text: string): string {
  return (text.split("\n").find((line) => line.trim() !== "") ?? text).slice(0, 300);
}

/** The fault raised when QEMU paused the guest on a failed disk request. */
export function pausedGuestError(pause: IoErrorPause, name: string, diskDir: string): VmError {
  const details = { operation: pause.operation, reason: pause.reason, device: pause.device };
  // QEMU's default policy (werror=enospc) pauses only on ENOSPC; anything else is reported to the
  // guest. So a pause whose event we missed is a full disk as well.
  if (pause.nospace === false) {
    return new VmError(
      "VM_DISK_FAILED",
      `the host failed a ${pause.operation ?? "disk"} request of ${name}'s disk in ${diskDir} (${pause.reason ?? "I/O error"}), and QEMU paused the guest`,
      { hint: `check the host disk, then stop and start ${name}`, details: { dir: diskDir, name, ...details } },
    );
  }
  return hostDiskFullError({ dir: diskDir, situation: "running", name, details });
}
