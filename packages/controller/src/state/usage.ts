// What running instances cost the host, for inspect and list: two /proc readings of each QEMU
// (vm's reader) a short window apart give its CPU share; the resident memory is the later reading,
// and inspect also sorts it into the guest's RAM, TCG's translation cache and QEMU itself.
// Nothing here talks to a daemon or a guest, so asking never wakes or slows an instance.
import { cpuPercent, qemuResidentMemory, qemuUsage, type ProcessUsage } from "@pi-sandbox/vm/host";
import type { EntryView } from "./inspect.js";
import type { StateLayout } from "./layout.js";

/** The window between the two readings, in ms: long enough for 100 Hz CPU ticks to mean something. */
export const USAGE_WINDOW_MS = 200;

/** States in which a QEMU may run. */
const RUNNING = new Set(["starting", "running", "stopping", "suspending"]);

/**
 * Adds `usage` to each view whose QEMU runs, all measured over one shared window (a list of ten
 * instances waits once, not ten times), with where the memory is when `memory` is set (a walk of
 * each QEMU's page tables: for inspect, not for list or the dashboard's polling). Views of entries
 * with no QEMU are left as they are.
 */
export async function addUsage(
  layout: StateLayout,
  views: EntryView[],
  { windowMs = USAGE_WINDOW_MS, memory = false }: { windowMs?: number; memory?: boolean } = {},
): Promise<void> {
  const live = views.filter((view) => RUNNING.has(view.state));
  if (live.length === 0) return;
  const read = () => Promise.all(live.map((view) => qemuUsage(layout.diskDir(view.kind, view.name))));
  const before = await read();
  if (before.every((usage) => usage === undefined)) return;
  await new Promise((resolve) => setTimeout(resolve, windowMs));
  const after = await read();
  const parts = memory
    ? await Promise.all(live.map((view) => qemuResidentMemory(layout.diskDir(view.kind, view.name))))
    : [];
  live.forEach((view, i) => {
    const [first, last]: (ProcessUsage | undefined)[] = [before[i], after[i]];
    if (!first || !last) return;
    view.usage = { cpuPercent: cpuPercent(first, last), rssBytes: last.rssBytes };
    const where = parts[i];
    if (where) view.usage.memory = where;
  });
}
