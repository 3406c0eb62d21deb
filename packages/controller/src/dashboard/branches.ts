// An instance's forks and kept checkpoints, as the page shows them side by side: each instance's
// kept checkpoints, and its forks grouped under it (the instances `list` says were forked from it,
// and their forks in turn). `list` already tells each instance's source and a summary of its kept
// checkpoints (how many, their bytes, the newest); the whole list (the `checkpoints` action, which
// reads the disk directory only) is read again only when that summary changed. Nothing here asks
// a daemon or a guest.
import type { CheckpointView } from "../state/checkpoints.js";
import type { EntryView } from "../state/inspect.js";
import type { CallFn } from "./call.js";

/** A kept checkpoint as the page lists it (what `checkpoints` returns for one). */
export type CheckpointEntry = CheckpointView;

/** A fork under its source, with its own forks. */
export interface ForkNode {
  /** The fork, an instance. */
  name: string;
  /** When it was forked, ISO time. */
  at: string;
  /** Its own forks, oldest first. */
  forks: ForkNode[];
}

/** What the page shows of one instance's branches. */
export interface InstanceBranches {
  /** The instance it was forked from, and when; `gone` when that instance no longer exists. */
  forkedFrom?: { name: string; at: string; gone?: true };
  /** Its forks, oldest first, each with its own. */
  forks: ForkNode[];
  /** Its kept checkpoints, oldest first. */
  checkpoints: CheckpointEntry[];
  /** Host bytes they hold beyond the instance's current disk. */
  checkpointBytes: number;
}

interface Sourced {
  name: string;
  at: string;
}

/** Each instance's forks as trees, oldest first; a loop in the records (never written) is cut. */
export function forkTrees(sources: ReadonlyMap<string, Sourced | undefined>): Map<string, ForkNode[]> {
  const children = new Map<string, { name: string; at: string }[]>();
  for (const [name, source] of sources) {
    if (!source || !sources.has(source.name) || source.name === name) continue;
    const list = children.get(source.name) ?? [];
    list.push({ name, at: source.at });
    children.set(source.name, list);
  }
  for (const list of children.values()) list.sort((a, b) => a.at.localeCompare(b.at) || a.name.localeCompare(b.name));
  const tree = (name: string, path: ReadonlySet<string>): ForkNode[] =>
    (children.get(name) ?? [])
      .filter((child) => !path.has(child.name))
      .map((child) => ({ ...child, forks: tree(child.name, new Set([...path, child.name])) }));
  return new Map([...sources.keys()].map((name) => [name, tree(name, new Set([name]))]));
}

/** What `list` says of an instance's kept checkpoints: when it changes, the list is read again. */
function keptSignature(view: EntryView): string {
  return view.kept ? `${view.createdAt}:${view.kept.count}:${view.kept.newest.id}:${view.kept.bytes}` : "";
}

/** Reads and keeps each instance's checkpoint list for the snapshot. */
export class BranchReader {
  readonly #call: CallFn;
  /** By name: the list and the summary it was read for. */
  readonly #checkpoints = new Map<string, { signature: string; list: CheckpointEntry[]; bytes: number }>();

  constructor(call: CallFn) {
    this.#call = call;
  }

  /** The branches of every instance in `views`. */
  async read(views: readonly EntryView[]): Promise<Record<string, InstanceBranches>> {
    const names = new Set(views.map((view) => view.name));
    for (const name of this.#checkpoints.keys()) if (!names.has(name)) this.#checkpoints.delete(name);
    const lists = await Promise.all(views.map((view) => this.#checkpointsOf(view)));
    const sources = new Map(views.map((view) => [view.name, view.forkedFrom] as const));
    const trees = forkTrees(sources);
    return Object.fromEntries(
      views.map((view, i) => {
        const source = view.forkedFrom && { name: view.forkedFrom.name, at: view.forkedFrom.at };
        const branches: InstanceBranches = {
          ...(source ? { forkedFrom: names.has(source.name) ? source : { ...source, gone: true as const } } : {}),
          forks: trees.get(view.name) ?? [],
          checkpoints: lists[i]!.list,
          checkpointBytes: lists[i]!.bytes,
        };
        return [view.name, branches];
      }),
    );
  }

  async #checkpointsOf(view: EntryView): Promise<{ list: CheckpointEntry[]; bytes: number }> {
    const signature = keptSignature(view);
    if (signature === "") return { list: [], bytes: 0 };
    const kept = this.#checkpoints.get(view.name);
    if (kept?.signature === signature) return kept;
    try {
      const answer = (await this.#call({ action: "checkpoints", name: view.name })) as {
        checkpoints: CheckpointEntry[];
        bytes: number;
      };
      const list = answer.checkpoints.map((c) => ({
        id: c.id,
        ...(c.label !== undefined ? { label: c.label } : {}),
        pinned: c.pinned,
        createdAt: c.createdAt,
        kind: c.kind,
        bytes: c.bytes,
      }));
      const read = { signature, list, bytes: answer.bytes };
      this.#checkpoints.set(view.name, read);
      return read;
    } catch {
      // Destroyed between list and now: nothing to show (the next change of the summary reads again).
      const none = { signature, list: [], bytes: 0 };
      this.#checkpoints.set(view.name, none);
      return none;
    }
  }
}
