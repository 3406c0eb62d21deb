// A live checkpoint's layer switch over QMP: QEMU's writes to the guest's root drive move onto a
// new layer (\`blockdev-snapshot-sync\`), and when QEMU does not answer in time, the file it writes
// now tells how the switch ended.
import { LayerSwitchRefused } from "../disk/disk-layout.js";
import { GONDOLIN_ROOT_DRIVE } from "../gondolin-private.js";
import { QmpCommandError, type QmpMonitor } from "../host/qmp.js";

/**
 * Bound of QEMU's layer switch: it drains the guest's disk requests in flight and flushes the
 * layer first, which a busy guest on a slow host disk can stretch far past QMP's usual 5 s.
 */
const SWITCH_TIMEOUT_MS = 60_000;

/**
 * The top file of a drive as `query-block` names it: a plain path, or, once a layer was attached
 * over another (`blockdev-snapshot-sync`), a `json:{…}` description whose `file.filename` is it.
 */
export function topFileOf(name: string | undefined): string | undefined {
  if (!name?.startsWith("json:")) return name;
  try {
    const described = JSON.parse(name.slice("json:".length)) as { file?: { filename?: unknown } };
    return typeof described.file?.filename === "string" ? described.file.filename : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Moves QEMU's writes to `file` (`mode: existing`: the layer exists, its backing the one QEMU
 * writes now). QEMU drains the guest's requests in flight, flushes the old layer, reopens it
 * read-only and attaches the new one on top; the guest's disk I/O waits meanwhile.
 */
export async function switchRootLayer(monitor: QmpMonitor, file: string): Promise<void> {
  try {
    await monitor.command(
      "blockdev-snapshot-sync",
      { device: GONDOLIN_ROOT_DRIVE, "snapshot-file": file, format: "qcow2", mode: "existing" },
      { timeoutMs: SWITCH_TIMEOUT_MS },
    );
  } catch (error) {
    // QEMU answered with an error, or was never asked: it still writes the old layer.
    if (error instanceof QmpCommandError && error.outcome !== "no-answer") {
      throw new LayerSwitchRefused(error.message, { cause: error });
    }
    // No answer in time. QMP answers one command after the other, so the file QEMU writes now
    // tells how the switch ended; without that answer the outcome stays unknown.
    const writing = await activeRootFile(monitor).catch(() => undefined);
    if (writing === file) return;
    if (writing !== undefined) throw new LayerSwitchRefused(`QEMU still writes ${writing}`, { cause: error });
    throw error;
  }
}

/** The file QEMU writes the root disk to now (QMP `query-block`). */
async function activeRootFile(monitor: QmpMonitor): Promise<string | undefined> {
  const devices = (await monitor.command("query-block", undefined, { timeoutMs: 10_000 })) as {
    device?: string;
    inserted?: { file?: string };
  }[];
  return topFileOf(devices.find((device) => device.device === GONDOLIN_ROOT_DRIVE)?.inserted?.file);
}
