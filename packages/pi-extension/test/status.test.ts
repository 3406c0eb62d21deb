// The footer's view of instances: which are shown, and which an attached session gives up.
import type { EntryView } from "@pi-sandbox/controller/client";
import { instancesStatus, isGone } from "../src/status.js";

function view(name: string, state: EntryView["state"], extra: Partial<EntryView> = {}): EntryView {
  return {
    name,
    kind: "instances",
    state,
    createdAt: "2026-12-02T00:00:00.000Z",
    resources: { cpus: 1, memoryGiB: 2 },
    diskGiB: 4,
    hostPorts: [],
    previews: [],
    errors: [],
    ...extra,
  };
}

test("an instance that suspended itself while unused stays in the footer, marked idle, and keeps Pi attached", () => {
  const url = "http://127.1.2.3:40000/";
  const asleep = view("nap", "suspended", {
    previews: [{ service: "web", url, title: "web" }],
    idle: { suspendAfterMs: 900_000, suspended: true },
  });
  expect(instancesStatus([asleep, view("off", "stopped")])).toBe(`sandbox: nap (idle) ${url}`);
  expect(isGone(asleep)).toBe(false);
  expect(isGone(view("cold", "suspended"))).toBe(true);
  expect(isGone(view("off", "stopped"))).toBe(true);
});
