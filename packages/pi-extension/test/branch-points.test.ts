// The mapping from conversation points to checkpoints, on hand-built session trees: a label on the
// point, the nearest labelled entries below it (the newest of the shallowest), the nearest above,
// the run's first entry, where /tree puts the leaf, and how labels read in /sandbox checkpoints.

import {
  describeLabel,
  labelEntry,
  leafAfterNavigation,
  pointLabel,
  resolvePoint,
  runEntry,
  type CheckpointInfo,
  type TreeEntry,
} from "../src/branch-points.js";

const user = (id: string, parentId: string | null, text: string): TreeEntry => ({
  id,
  parentId,
  type: "message",
  message: { role: "user", content: [{ type: "text", text }] },
});
const assistant = (id: string, parentId: string | null): TreeEntry => ({
  id,
  parentId,
  type: "message",
  message: { role: "assistant", content: [] },
});
const result = (id: string, parentId: string): TreeEntry => ({
  id,
  parentId,
  type: "message",
  message: { role: "toolResult", content: [] },
});

let clock = 0;
const kept = (id: string, label?: string): CheckpointInfo => ({
  id,
  ...(label !== undefined ? { label } : {}),
  pinned: false,
  createdAt: new Date(Date.UTC(2026, 0, 1, 0, 0, clock++)).toISOString(),
  kind: "disk",
  bytes: 0,
});

// m0 ─ u1 "first" ─ a1 ─ r1 ─ e1 ─ u2 "second" ─ a2 ─ r2 ─ e2
//                                 └ u2b "again" ─ a2b ─ r2b ─ e2b
const tree: TreeEntry[] = [
  { id: "m0", parentId: null, type: "model_change" },
  user("u1", "m0", "first"),
  assistant("a1", "u1"),
  result("r1", "a1"),
  assistant("e1", "r1"),
  user("u2", "e1", "second"),
  assistant("a2", "u2"),
  result("r2", "a2"),
  assistant("e2", "r2"),
  user("u2b", "e1", "again\nwith a second line"),
  assistant("a2b", "u2b"),
  result("r2b", "a2b"),
  assistant("e2b", "r2b"),
];

test("labels name entries; the root has a label of its own; other labels are not ours", () => {
  expect(pointLabel("u1")).toBe("pi:u1");
  expect(pointLabel(null)).toBe("pi:root");
  expect(labelEntry("pi:u1")).toBe("u1");
  expect(labelEntry("pi:root")).toBeNull();
  expect(labelEntry("before rewind to pi:u1")).toBeUndefined();
  expect(labelEntry("pi:")).toBeUndefined();
  expect(labelEntry(undefined)).toBeUndefined();
});

test("tree navigation puts the leaf on a user message's parent, else on the entry", () => {
  expect(leafAfterNavigation(tree[1]!)).toBe("m0");
  expect(leafAfterNavigation(tree[4]!)).toBe("e1");
  expect(leafAfterNavigation({ id: "c", parentId: "e1", type: "custom_message" })).toBe("e1");
});

test("a run's first entry follows the leaf it started at; from an empty session, the first entry", () => {
  const branch = tree.slice(0, 9);
  expect(runEntry(branch, "e1")).toBe("u2");
  expect(runEntry(branch, "m0")).toBe("u1");
  expect(runEntry(branch.slice(1), null)).toBe("u1");
  // A start the branch does not pass (it moved meanwhile): the leaf.
  expect(runEntry(branch, "zz")).toBe("e2");
  // A message delivered before the user's (a steer) is passed over for the user's.
  const steered = [tree[0]!, { id: "s", parentId: "m0", type: "custom_message" }, { ...tree[1]!, parentId: "s" }];
  expect(runEntry(steered, "m0")).toBe("u1");
  expect(runEntry(steered.slice(0, 2), "m0")).toBe("s");
});

test("a point maps to its own label, else the nearest below, else the nearest above", () => {
  const before1 = kept("000000000001", "pi:u1");
  const before2 = kept("000000000002", "pi:u2");
  const checkpoints = [before1, before2, kept("000000000003", "someone's own")];
  // Selecting "first" in /tree puts the leaf on m0: the state before the first turn.
  expect(resolvePoint(tree, checkpoints, "m0")).toEqual({ checkpoint: before1, entryId: "u1", relation: "below" });
  // The end of the first turn: the checkpoint taken before the second, which nothing changed in between.
  expect(resolvePoint(tree, checkpoints, "e1")).toEqual({ checkpoint: before2, entryId: "u2", relation: "below" });
  // A point with its own label.
  expect(resolvePoint(tree, checkpoints, "u2")?.relation).toBe("at");
  // The end of the last turn has nothing below: the nearest above (the state before that turn).
  expect(resolvePoint(tree, checkpoints, "e2")).toEqual({ checkpoint: before2, entryId: "u2", relation: "above" });
  // No checkpoint of ours at all.
  expect(resolvePoint(tree, [kept("000000000009", "mine")], "e1")).toBeUndefined();
  expect(resolvePoint(tree, [], "e1")).toBeUndefined();
});

test("below, the shallowest labelled entries win, the newest among them; a label's newest checkpoint counts", () => {
  const second = kept("000000000010", "pi:u2");
  const again = kept("000000000011", "pi:u2b");
  const tip = kept("000000000012", "pi:e2");
  expect(resolvePoint(tree, [tip, second, again], "e1")?.checkpoint).toBe(again);
  expect(resolvePoint(tree, [again, second], "e1")?.checkpoint).toBe(again);
  // A deeper label on one branch loses to a shallower one on another.
  expect(resolvePoint(tree, [second, kept("000000000013", "pi:a2b")], "e1")?.checkpoint).toBe(second);
  // Two checkpoints with one label: the newest.
  const newer = kept("000000000014", "pi:u2");
  expect(resolvePoint(tree, [second, newer], "u2")?.checkpoint).toBe(newer);
  // The root's label is found from above.
  const root = kept("000000000015", "pi:root");
  expect(resolvePoint(tree, [root], "e2")).toEqual({ checkpoint: root, entryId: null, relation: "above" });
  expect(resolvePoint(tree, [root], null)?.relation).toBe("at");
});

test("labels read as the turn they belong to", () => {
  expect(describeLabel(tree, "pi:u1")).toBe('before "first"');
  expect(describeLabel(tree, "pi:u2b")).toBe('before "again with a second line"');
  expect(describeLabel(tree, "pi:e2")).toBe('after "second"');
  expect(describeLabel(tree, "pi:m0")).toBe("before the conversation");
  expect(describeLabel(tree, "pi:root")).toBe("before the conversation");
  expect(describeLabel(tree, "pi:gone")).toBe("pi:gone (not in this session)");
  expect(describeLabel(tree, "before rewind to x")).toBe('"before rewind to x"');
  expect(describeLabel(tree, undefined)).toBe("(no label)");
  const long = [user("u", null, "x".repeat(100))];
  expect(describeLabel(long, "pi:u")).toBe(`before "${"x".repeat(59)}…"`);
});
