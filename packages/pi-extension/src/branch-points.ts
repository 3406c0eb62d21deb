// Which kept checkpoint of an instance belongs to which point of Pi's conversation tree. Pure
// functions over session entries and a checkpoint list, so the mapping is tested without Pi.
//
// A checkpoint labelled `pi:<entry id>` holds the environment as it was at that entry:
//   - before a turn that may change the instance, the label is the turn's first entry (its user
//     message): the state when the user sent it, the same as at the entry before it;
//   - when /tree leaves a branch, the label is the leaf being left: the state at its tip.
// The state at a point is then held by the checkpoint labelled with the point itself, else by the
// nearest labelled entry below it (every turn that changed the instance has a checkpoint at its
// start, so nothing changed between the point and that label), else by the nearest labelled entry
// above it (exact when nothing ran in between, the state before the turn otherwise).

import type { CheckpointView } from "@pi-sandbox/controller/client";

/** Prefix of the labels this package gives checkpoints. */
export const LABEL_PREFIX = "pi:";

/** The label's stand-in for "before the first entry" (an empty session). */
const ROOT = "root";

/** A kept checkpoint as the controller's `checkpoints` action lists it. */
export type CheckpointInfo = CheckpointView;

/** What the mapping needs of a session entry. */
export interface TreeEntry {
  id: string;
  parentId: string | null;
  type: string;
  message?: { role?: string; content?: unknown };
  content?: unknown;
}

/** The label of the checkpoint that holds the state at `entryId` (null: before the first entry). */
export function pointLabel(entryId: string | null): string {
  return `${LABEL_PREFIX}${entryId ?? ROOT}`;
}

/** The entry a label names: an id, null for the root, undefined for a label that is not ours. */
export function labelEntry(label: string | undefined): string | null | undefined {
  if (!label?.startsWith(LABEL_PREFIX)) return undefined;
  const id = label.slice(LABEL_PREFIX.length);
  if (id === "") return undefined;
  return id === ROOT ? null : id;
}

/** Where Pi's tree navigation puts the leaf: a user (or custom) message's parent, else the entry. */
export function leafAfterNavigation(target: TreeEntry): string | null {
  if (target.type === "message" && target.message?.role === "user") return target.parentId;
  if (target.type === "custom_message") return target.parentId;
  return target.id;
}

/**
 * The entry a run's checkpoint is labelled with: the first user message the run added on `branch`
 * (root to leaf) after `runStartLeaf`, else the run's first entry (a message the run began with
 * before the user's, such as a steer, changes nothing). Falls back to the leaf when the branch does
 * not pass `runStartLeaf`.
 */
export function runEntry(branch: readonly TreeEntry[], runStartLeaf: string | null): string | null {
  const start = runStartLeaf === null ? 0 : branch.findIndex((e) => e.id === runStartLeaf) + 1;
  if (start === 0 && runStartLeaf !== null) return branch.at(-1)?.id ?? null;
  const added = branch.slice(start);
  const first = added.find((e) => e.type === "message" && e.message?.role === "user") ?? added[0];
  return first?.id ?? branch.at(-1)?.id ?? null;
}

/** How a found checkpoint stands to the point asked about. */
export type PointRelation = "at" | "below" | "above";

/** The checkpoint for a point, the entry its label names, and how that entry stands to the point. */
export interface ResolvedPoint {
  checkpoint: CheckpointInfo;
  entryId: string | null;
  relation: PointRelation;
}

/** The newest checkpoint for each labelled entry (the list is oldest first). */
function byEntry(checkpoints: readonly CheckpointInfo[]): Map<string | null, CheckpointInfo> {
  const map = new Map<string | null, CheckpointInfo>();
  for (const c of checkpoints) {
    const entry = labelEntry(c.label);
    if (entry === undefined) continue;
    const seen = map.get(entry);
    if (!seen || seen.createdAt <= c.createdAt) map.set(entry, c);
  }
  return map;
}

/**
 * The checkpoint that holds the environment at `point` (a leaf id, null for the root): labelled
 * with the point, else the nearest labelled entries below it (the newest of those at the same
 * depth), else the nearest labelled entry above it. Undefined when none of its checkpoints relates.
 */
export function resolvePoint(
  entries: readonly TreeEntry[],
  checkpoints: readonly CheckpointInfo[],
  point: string | null,
): ResolvedPoint | undefined {
  const labelled = byEntry(checkpoints);
  if (labelled.size === 0) return undefined;
  const at = labelled.get(point);
  if (at) return { checkpoint: at, entryId: point, relation: "at" };

  const children = new Map<string | null, string[]>();
  const parents = new Map<string, string | null>();
  for (const e of entries) {
    parents.set(e.id, e.parentId);
    const list = children.get(e.parentId) ?? [];
    list.push(e.id);
    children.set(e.parentId, list);
  }

  // Below: breadth first, not past a labelled entry; the newest of the shallowest found.
  let level = children.get(point) ?? [];
  while (level.length > 0) {
    const found = level.flatMap((id) => {
      const c = labelled.get(id);
      return c ? [{ checkpoint: c, entryId: id }] : [];
    });
    if (found.length > 0) {
      const newest = found.reduce((a, b) => (b.checkpoint.createdAt > a.checkpoint.createdAt ? b : a));
      return { ...newest, relation: "below" };
    }
    level = level.flatMap((id) => children.get(id) ?? []);
  }

  // Above: the nearest labelled ancestor (the root's label last).
  let up = point === null ? undefined : parents.get(point);
  while (up !== undefined) {
    const c = labelled.get(up);
    if (c) return { checkpoint: c, entryId: up, relation: "above" };
    if (up === null) break;
    up = parents.get(up);
  }
  return undefined;
}

/** Text of a message entry's content, on one line. */
function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((part) => (part && typeof part === "object" && "text" in part ? String(part.text) : "")).join(" ");
}

/** A short excerpt of a user message, on one line. */
export function excerpt(text: string, max = 60): string {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/** The user's words of an entry that is a user message, else undefined. */
function userText(entry: TreeEntry | undefined): string | undefined {
  if (entry?.type === "message" && entry.message?.role === "user") return contentText(entry.message.content);
  return undefined;
}

/**
 * What a checkpoint's label means in this session, in words: `before "<the turn's message>"` for
 * a turn's checkpoint, `after "<the last message before it>"` for a branch tip, the label itself
 * when it is not one of ours or names an entry of another session.
 */
export function describeLabel(entries: readonly TreeEntry[], label: string | undefined): string {
  const entryId = labelEntry(label);
  if (entryId === undefined) return label === undefined ? "(no label)" : JSON.stringify(label);
  if (entryId === null) return "before the conversation";
  const byId = new Map(entries.map((e) => [e.id, e]));
  const entry = byId.get(entryId);
  if (!entry) return `${label} (not in this session)`;
  const own = userText(entry);
  if (own !== undefined) return `before "${excerpt(own)}"`;
  for (let up: TreeEntry | undefined = entry; up; up = up.parentId ? byId.get(up.parentId) : undefined) {
    const text = userText(up);
    if (text !== undefined) return `after "${excerpt(text)}"`;
  }
  return "before the conversation";
}
