// Host directories shared read-only with the guest, as Gondolin VFS mounts: the guest reaches them
// through Gondolin's FUSE file system, every write fails with EROFS, and nothing of them is on the
// VM's disk (checkpoints and templates hold only the empty mount points).
import fsp from "node:fs/promises";
import path from "node:path";
import type { VirtualProvider } from "@earendil-works/gondolin";
import { VmError } from "../errors.js";
import type { GondolinModule } from "../gondolin-loader.js";

/** A host directory shared read-only. */
export interface VmMount {
  /** Absolute host path of an existing directory. */
  hostPath: string;
  /** Absolute guest path where it appears. */
  guestPath: string;
}

/** Gondolin's `vfs.mounts` for `mounts` (undefined for none); each host path must be an existing directory. */
export async function readonlyMounts(
  gondolin: Pick<GondolinModule, "ReadonlyProvider" | "RealFSProvider">,
  mounts: readonly VmMount[],
): Promise<Record<string, VirtualProvider> | undefined> {
  if (mounts.length === 0) return undefined;
  const out: Record<string, VirtualProvider> = {};
  for (const mount of mounts) {
    const guestPath = path.posix.normalize(mount.guestPath).replace(/(?<=.)\/+$/, "");
    if (!path.posix.isAbsolute(guestPath) || guestPath === "/" || Object.hasOwn(out, guestPath)) {
      throw new VmError(
        "VM_MOUNT_INVALID",
        `mount guest path ${mount.guestPath} must be an absolute path other than / and used once`,
        {
          details: { hostPath: mount.hostPath, guestPath: mount.guestPath },
        },
      );
    }
    if (!path.isAbsolute(mount.hostPath)) {
      throw new VmError("VM_MOUNT_INVALID", `mount host path ${mount.hostPath} must be absolute`, {
        details: { hostPath: mount.hostPath, guestPath: mount.guestPath },
      });
    }
    let why: string | undefined;
    try {
      if (!(await fsp.stat(mount.hostPath)).isDirectory()) why = "is not a directory";
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      why = code === "ENOENT" ? "does not exist" : `cannot be read (${code ?? String(error)})`;
    }
    if (why) {
      throw new VmError("VM_MOUNT_INVALID", `mount host path ${mount.hostPath} ${why}`, {
        hint: "create it or fix mounts in sandbox.yaml",
        details: { hostPath: mount.hostPath, guestPath: mount.guestPath },
      });
    }
    out[guestPath] = new gondolin.ReadonlyProvider(new gondolin.RealFSProvider(mount.hostPath));
  }
  return out;
}
