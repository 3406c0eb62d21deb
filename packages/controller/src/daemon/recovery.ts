// What a start does with what its boot found of a run whose controller died (its disk layer is the
// checkpoint now, or it was set aside): recorded for inspect and the log, and a pending create
// whose killed first boot had finished setup is not run again.
import { completePendingCreate } from "../state/records.js";
import type { ProgressEvent } from "../wire.js";
import type { BootOptions } from "./create.js";
import type { RuntimeVm } from "./runtime.js";
import type { InstanceState } from "./state.js";

/**
 * Records `vm.recovery` in the status (and a set-aside layer in its list, and as an error), and
 * returns what remains of a pending create: nothing when the run that died had finished setup (its
 * work is on the recovered disk, and setup must not run again).
 */
export async function noteRecovery(
  state: InstanceState,
  vm: RuntimeVm,
  options: BootOptions,
  progress: (event: ProgressEvent) => void,
): Promise<BootOptions["pendingCreate"]> {
  const found = vm.recovery;
  let pending = options.pendingCreate;
  if (found) {
    const at = new Date().toISOString();
    const setAside = found.setAside
      ? [
          ...(state.status.setAside ?? []),
          {
            path: found.setAside.path,
            bytes: found.setAside.bytes,
            at,
            lastWriteAt: found.lastWriteAt,
            reason: found.setAside.reason,
          },
        ]
      : state.status.setAside;
    const recovery = { outcome: found.outcome, lastWriteAt: found.lastWriteAt, reopened: found.reopened, at };
    await state.setState("starting", { recovery, ...(setAside ? { setAside } : {}) });
    if (found.outcome === "set-aside") {
      state.recordError(
        "CONTROLLER_RUN_SET_ASIDE",
        `the disk of the run that ended without a checkpoint could not be used (${found.setAside?.reason ?? "unusable"}); reopened the checkpoint of ${found.reopened.at}`,
        `It is kept at ${found.setAside?.path ?? "the disk's set-aside directory"} until you remove it.`,
      );
    }
    // The create's first boot got as far as finishing setup: its work is on this disk.
    if (pending && options.interrupted && found.outcome === "recovered" && state.status.setup) {
      await completePendingCreate(state.layout, state.name);
      progress({ stage: "boot", message: "the interrupted create had finished setup: its work is kept" });
      pending = undefined;
    }
  }
  if (pending && options.interrupted && !pending.fork) {
    progress({ stage: "boot", message: `finishing the interrupted create of ${state.name}` });
  }
  return pending;
}
