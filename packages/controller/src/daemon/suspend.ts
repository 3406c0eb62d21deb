// Suspend, and the warm start after it. A suspend is a stop that keeps the guest's memory: the
// agent's channel is detached (not shut down), so the agent and its services stay in that memory,
// and the next start of the disk resumes them; see the vm package's "Suspend and resume".

import type { EntryView } from "../state/inspect.js";
import type { EntryStatus, LastStart } from "../state/records.js";
import type { ProgressEvent } from "../wire.js";
import type { InstanceRuntime, RuntimeVm } from "./runtime.js";
import type { GuestOperations } from "./services.js";
import { toControllerError, type InstanceState } from "./state.js";

type Progress = (event: ProgressEvent) => void;

/** What a suspend's teardown reports. */
export interface SuspendTeardown {
  totalMs: number;
  memoryBytes?: number;
}

/**
 * Cuts previews and terminal clients, detaches the agent, saves memory and checkpoint, and leaves
 * the entry `suspended` with the preview links a warm start reopens. Not running: nothing to do
 * (but an instance that suspended itself gives its previews up and reads plainly suspended). The
 * daemon exits after it, as after a stop; except after an auto-suspend (`idle`), where it stays,
 * its previews bound, until a request or action wakes the instance. A failed suspend ends the
 * daemon either way.
 */
export async function suspendInstance(
  state: InstanceState,
  teardown: (options: {
    checkpoint: true;
    keepMemory: true;
    keepPreviews?: boolean;
  }) => Promise<SuspendTeardown | undefined>,
  progress: Progress,
  options: { idle?: boolean } = {},
): Promise<EntryView> {
  if (!state.vm) {
    if (!options.idle) await giveUpPreviews(state);
    state.finish();
    return state.view();
  }
  const previews = state.status.previews ?? [];
  let finish = !options.idle;
  try {
    await state.setState("suspending").catch((e: unknown) => state.log.warn(`writing status: ${String(e)}`));
    progress({
      stage: "suspend",
      message: options.idle
        ? "unused: saving memory; previews stay bound and the next request resumes it"
        : "closing previews and terminal clients; services keep running",
    });
    const result = await teardown({ checkpoint: true, keepMemory: true, keepPreviews: options.idle === true });
    const mib = ((result?.memoryBytes ?? 0) / 2 ** 20).toFixed(0);
    progress({
      stage: "checkpoint",
      message: `memory (${mib} MiB) and checkpoint saved in ${((result?.totalMs ?? 0) / 1000).toFixed(1)} s`,
    });
    // Written last: a daemon that dies before this line leaves "suspending" (read as interrupted,
    // and start reopens the last complete checkpoint); one that dies after leaves an ordinary
    // suspended instance whose memory start resumes.
    await state.setState("suspended", { previews, ...(options.idle ? { suspendedBy: "idle" as const } : {}) });
  } catch (error) {
    finish = true;
    await giveUpPreviews(state);
    const e = toControllerError(error);
    if (e.code === "VM_SUSPEND_FAILED" && e.details?.diskSaved === true) {
      // The disk was still checkpointed: the instance is stopped, and its next start is cold.
      state.recordError(e.code, e.message, e.hint ?? "The disk was checkpointed without memory: start boots it cold.");
      await state.setState("stopped", { previews: [] }).catch(() => undefined);
    } else {
      state.recordError(e.code, e.message, e.hint ?? "The previous checkpoint is kept; start reopens it.");
      await state.setState("failed").catch(() => undefined);
    }
    throw e;
  } finally {
    if (finish) state.finish();
  }
  return state.view();
}

/**
 * Closes the previews an auto-suspended instance's daemon held (none otherwise) and drops the
 * `idle` mark: the daemon is about to exit, and nothing will wake the instance but a start.
 */
async function giveUpPreviews(state: InstanceState): Promise<void> {
  const { gateway } = state;
  state.gateway = undefined;
  if (!gateway) return;
  await gateway.closeAll().catch((e: unknown) => state.log.warn(`closing previews: ${String(e)}`));
  if (state.status.suspendedBy) {
    delete state.status.suspendedBy;
    await state.setState(state.status.state).catch((e: unknown) => state.log.warn(`writing status: ${String(e)}`));
  }
}

/**
 * `stop` of a suspended instance: its saved memory goes (the processes in it end), and it reads
 * stopped, its next start a cold boot of the checkpoint taken at the suspend.
 */
export async function dropSuspendedMemory(state: InstanceState, runtime: InstanceRuntime, progress: Progress) {
  await runtime.disks.dropSavedMemory(state.layout.diskDir("instances", state.name));
  await state.setState("stopped", { previews: [] });
  progress({ stage: "stop", message: "saved memory deleted; the next start boots the same checkpoint cold" });
}

/**
 * Tells the user how a boot used saved memory (the boot's status recorded it, boot-vm.ts); true
 * when the guest resumed, its agent, services and processes running on. A cold fall-back's reason
 * was already reported by the boot.
 */
export function noteRestore(vm: RuntimeVm, progress: Progress): boolean {
  const restore = vm.restore;
  if (!restore?.warm) return false;
  progress({
    stage: "boot",
    message: `resumed from saved memory in ${(restore.restoreMs / 1000).toFixed(1)} s; services and processes run on`,
  });
  return true;
}

/**
 * The rest of a warm start, once the agent is reattached: its services and processes ran on, so
 * no setup or resume hooks; services ensure reopens the declared previews on their leased ports
 * (and starts only what is missing), then the suspended run's other previews are reopened;
 * `alongside` (a new guest's identity) runs meanwhile, and the start is running once both are done.
 */
export async function finishWarmStart(
  state: InstanceState,
  guest: GuestOperations,
  suspended: EntryStatus | undefined,
  progress: Progress,
  started: number,
  alongside: () => Promise<void> = async () => undefined,
): Promise<void> {
  progress({ stage: "services", message: "reopening previews" });
  const reopened = (async () => {
    await guest.ensureWithProgress(progress);
    await guest.reopenPreviews(suspended?.previews ?? [], progress);
  })();
  // Both settle before a failure is reported: the failed start's teardown must not race the other.
  for (const outcome of await Promise.allSettled([alongside(), reopened])) {
    if (outcome.status === "rejected") throw outcome.reason;
  }
  const resumePid = suspended?.resumePid;
  await state.setState("running", { ...(resumePid ? { resumePid } : {}), lastStart: lastStart(started, true) });
  progress({ stage: "done", message: `${state.name} is running` });
}

/** The `lastStart` of a start that began at `started` (ms) and has just reached running. */
export function lastStart(started: number, warm: boolean): LastStart {
  return { at: new Date().toISOString(), ms: Date.now() - started, warm };
}
