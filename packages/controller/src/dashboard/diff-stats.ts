// Diff stats on the page's demand: what a fork changed against the instance it was forked from
// (`diff --against`), and what an instance changed since one of its kept checkpoints (`diff
// --since`), through the `diff` action with `stat`. Each runs in the guest, so the page asks for
// one (a button), never the poll; the page may ask only about what it shows, only of running
// instances (a suspended one is never woken), and an answer is kept for `ttlMs`. The paths are a
// guest's: they go out escaped, like the rest of the page's guest text.
import { ControllerError } from "../errors.js";
import type { EntryView } from "../state/inspect.js";
import type { InstanceBranches } from "./branches.js";
import { escapeDeep, type CallFn } from "./snapshot.js";

/** How long a diff stat is kept, in ms: a second click within it runs nothing in the guest. */
export const DIFF_TTL_MS = 15_000;
/** Most diff stats running at once; more wait their turn. */
export const DIFF_MAX_RUNNING = 2;
/** Most files an answer names (the totals count them all). */
export const DIFF_MAX_FILES = 50;

/** What the page asks: the changes of `name` against its source, or since one of its checkpoints. */
export type DiffRequest = { name: string; against: string } | { name: string; since: string };

/** One file of a diff stat. */
export interface DiffStatFile {
  path: string;
  /** The path it was renamed or copied from. */
  oldPath?: string;
  status: string;
  added: number;
  deleted: number;
  binary?: boolean;
}

/** What the page gets. */
export interface DiffStatView {
  name: string;
  against?: string;
  since?: string;
  /** Files changed, lines added and removed. */
  files: number;
  added: number;
  deleted: number;
  /** The first {@link DIFF_MAX_FILES} files. */
  changed: DiffStatFile[];
  /** When the guest was asked, ISO time. */
  at: string;
}

/** What the dashboard knows when it checks a request: the latest snapshot's instances and branches. */
export interface DiffScope {
  instances: readonly EntryView[];
  branches: Readonly<Record<string, InstanceBranches>>;
}

const bad = (message: string) =>
  new ControllerError("CONTROLLER_BAD_INPUT", message, {
    hint: "The page asks for a fork's diff against its source, or an instance's since one of its checkpoints.",
  });

function requireRunning(scope: DiffScope, name: string, why: string): void {
  const view = scope.instances.find((v) => v.name === name);
  if (view?.state === "running") return;
  throw new ControllerError("CONTROLLER_NOT_RUNNING", `${name} is not running${why}`, {
    hint: `Start it (pi-sandbox start ${name}) to see the diff stat; the page never wakes an instance.`,
    details: { name },
  });
}

/** The page's request checked against what the page shows; the diff action it runs. */
export function diffRequest(body: unknown, scope: DiffScope): DiffRequest {
  const { name, against, since } = (body ?? {}) as Record<string, unknown>;
  if (typeof name !== "string") throw bad("the diff names no instance");
  const branches = scope.branches[name];
  if (!branches) throw bad(`${JSON.stringify(name)} is not an instance the page shows`);
  if (typeof against === "string" && since === undefined) {
    if (branches.forkedFrom?.name !== against || branches.forkedFrom.gone) {
      throw bad(`${name} was not forked from ${JSON.stringify(against)}`);
    }
    requireRunning(scope, name, "");
    requireRunning(scope, against, `: ${name}'s diff against it reads its workspace`);
    return { name, against };
  }
  if (typeof since === "string" && against === undefined) {
    if (!branches.checkpoints.some((c) => c.id === since)) {
      throw bad(`${name} keeps no checkpoint ${JSON.stringify(since)}`);
    }
    requireRunning(scope, name, "");
    return { name, since };
  }
  throw bad("the diff names one base: against (its source) or since (a checkpoint id)");
}

/** Runs diff stats through the action layer, keeps each for a while, and runs few at once. */
export class DiffStats {
  readonly #call: CallFn;
  readonly #ttlMs: number;
  readonly #now: () => number;
  readonly #kept = new Map<string, { at: number; answer: Promise<DiffStatView> }>();
  #running = 0;
  readonly #waiting: (() => void)[] = [];

  constructor(call: CallFn, options: { ttlMs?: number; now?: () => number } = {}) {
    this.#call = call;
    this.#ttlMs = options.ttlMs ?? DIFF_TTL_MS;
    this.#now = options.now ?? Date.now;
  }

  /** The stat of `request`: kept, joined while it runs, or asked of the guest. */
  get(request: DiffRequest): Promise<DiffStatView> {
    const now = this.#now();
    for (const [key, entry] of this.#kept) if (now - entry.at >= this.#ttlMs) this.#kept.delete(key);
    const key =
      "against" in request ? `${request.name}\0a\0${request.against}` : `${request.name}\0s\0${request.since}`;
    const kept = this.#kept.get(key);
    if (kept) return kept.answer;
    const answer = this.#turn(() => this.#run(request, now));
    this.#kept.set(key, { at: now, answer });
    // A failure is not kept: the next click asks again.
    answer.catch(() => this.#kept.get(key)?.answer === answer && this.#kept.delete(key));
    return answer;
  }

  async #turn<T>(work: () => Promise<T>): Promise<T> {
    // A slot is handed from the one that ends to the one that waited longest.
    if (this.#running < DIFF_MAX_RUNNING) this.#running++;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    try {
      return await work();
    } finally {
      const next = this.#waiting.shift();
      if (next) next();
      else this.#running--;
    }
  }

  async #run(request: DiffRequest, now: number): Promise<DiffStatView> {
    const result = (await this.#call({ action: "diff", ...request, stat: true })) as {
      stat: { files: number; added: number; deleted: number };
      files?: DiffStatFile[];
    };
    const changed = (result.files ?? []).slice(0, DIFF_MAX_FILES).map((f) => ({
      path: f.path,
      ...(f.oldPath !== undefined ? { oldPath: f.oldPath } : {}),
      status: f.status,
      added: f.added,
      deleted: f.deleted,
      ...(f.binary ? { binary: true } : {}),
    }));
    return escapeDeep({
      ...request,
      files: result.stat.files,
      added: result.stat.added,
      deleted: result.stat.deleted,
      changed,
      at: new Date(now).toISOString(),
    });
  }
}
