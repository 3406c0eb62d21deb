// A running instance's view as inspect and list build it, for tests of what prints or serves one.
import type { EntryView } from "../../src/state/inspect.js";

/** A running tiny instance with no previews or errors; `extra` replaces or adds fields. */
export function runningView(extra: Partial<EntryView> = {}): EntryView {
  return {
    name: "demo",
    kind: "instances",
    state: "running",
    createdAt: "2026-01-01T00:00:00.000Z",
    resources: { cpus: 1, memoryGiB: 2 },
    diskGiB: 4,
    hostPorts: [],
    previews: [],
    errors: [],
    ...extra,
  };
}
