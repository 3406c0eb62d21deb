// How inspect prints what a running instance's QEMU costs: CPU and resident memory, and where that
// memory is (the guest's RAM, TCG's translation cache only when there is one, QEMU itself).
import { formatView } from "../src/actions/kit/text.js";
import type { EntryView } from "../src/state/inspect.js";
import { runningView } from "./support/views.js";

const MiB = 2 ** 20;
const view = (usage: EntryView["usage"]): EntryView => runningView(usage ? { usage } : {});
const linesOf = (text: string) => text.split("\n").filter((line) => /^(usage|resident):/.test(line));

test("inspect says where a QEMU's resident memory is, naming the translation cache only under TCG", () => {
  const tcg = { guestBytes: 210 * MiB, translationCacheBytes: 130 * MiB, otherBytes: 85 * MiB };
  expect(linesOf(formatView(view({ cpuPercent: 1, rssBytes: 425 * MiB, memory: tcg })))).toEqual([
    "usage:       1.0 % CPU, 425.0 MiB resident (QEMU)",
    "resident:    guest memory 210.0 MiB, translation cache 130.0 MiB (software emulation keeps it while it runs), QEMU itself 85.0 MiB",
  ]);
  const kvm = { guestBytes: 210 * MiB, translationCacheBytes: 0, otherBytes: 60 * MiB };
  expect(linesOf(formatView(view({ cpuPercent: 0.5, rssBytes: 270 * MiB, memory: kvm })))).toEqual([
    "usage:       0.5 % CPU, 270.0 MiB resident (QEMU)",
    "resident:    guest memory 210.0 MiB, QEMU itself 60.0 MiB",
  ]);
  // list's reading (no breakdown) and a stopped instance (no QEMU).
  expect(linesOf(formatView(view({ cpuPercent: 0.5, rssBytes: 270 * MiB })))).toEqual([
    "usage:       0.5 % CPU, 270.0 MiB resident (QEMU)",
  ]);
  expect(linesOf(formatView(view(undefined)))).toEqual([]);
});
