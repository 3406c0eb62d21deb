// What the dashboard page shows, polled through the action layer (`list`, as the CLI calls it):
// every instance and template, and a short history of each running instance's CPU and memory for
// its sparkline, each instance's forks and kept checkpoints (branches.ts), and the requests a
// running instance's guest holds for the user's answer (`egress`), and the instances of the other
// contexts (contexts.ts: polled beside, never before, the local list). `list`, `checkpoints` and
// `egress` read /proc, the state files and disk directories only, so polling wakes no
// instance and starts no daemon. Every string goes out with its control characters escaped:
// preview titles, checkpoint labels, error messages and log lines may be written by a guest.
import { escapeControlChars } from "@pi-sandbox/config";
import type { ControllerErrorJson } from "../errors.js";
import { isControllerError } from "../errors.js";
import type { EgressAsk } from "../state/egress.js";
import type { EntryView } from "../state/inspect.js";
import { BranchReader, type InstanceBranches } from "./branches.js";
import type { CallFn } from "./call.js";

/** How long the sparkline's history reaches back, in ms. */
export const HISTORY_MS = 10 * 60_000;

/** One sample of a running instance's cost. */
export interface UsageSample {
  /** When, in ms since the epoch. */
  t: number;
  /** CPU in percent of one host CPU. */
  cpu: number;
  /** Resident memory in bytes. */
  rss: number;
}

/** An instance as the page gets it: its view and the context it is in. */
export type ContextView = EntryView & { context: string };

/** Another context's instances, or why they could not be listed. */
export interface ContextInstances {
  /** The context's name. */
  context: string;
  /** Its `ssh://` URL. */
  url: string;
  /** Its instances, as `list` there returns them (empty when `error` is set). */
  instances: ContextView[];
  /** Why the context could not be listed (unreachable, too slow, refused). */
  error?: ControllerErrorJson;
  /** The requests its running instances' guests hold for the user's answer (only instances with any). */
  egress?: Record<string, EgressAsk[]>;
}

/** What the page gets on each refresh. */
export interface DashboardSnapshot {
  /** This machine's instances (context `local`), as `list` returns them. */
  instances: ContextView[];
  /** Every other context's instances, by name, as last polled (only while a page listens). */
  contexts: ContextInstances[];
  /** Templates, as `list --templates` returns them. */
  templates: EntryView[];
  /** The last 10 minutes of samples per running instance. */
  history: Record<string, UsageSample[]>;
  /** Each instance's forks (grouped under it, recursively) and kept checkpoints. */
  branches: Record<string, InstanceBranches>;
  /** Whether the page may ask for diff stats (the action layer has `diff`). */
  diff: boolean;
  /** The requests each running instance's guest holds for the user's answer (only instances with any). */
  egress: Record<string, EgressAsk[]>;
  /** When the snapshot was taken, ISO time. */
  at: string;
  /** Why the last poll failed, if it did (the previous lists are kept). */
  error?: ControllerErrorJson;
}

export type { CallFn } from "./call.js";

/** Every string in `value` with its control characters escaped (a deep copy). */
export function escapeDeep<T>(value: T): T {
  if (typeof value === "string") return escapeControlChars(value) as T;
  if (Array.isArray(value)) return value.map(escapeDeep) as T;
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, escapeDeep(v)])) as T;
  }
  return value;
}

/** An error as the page shows it: code, message, hint (escaped like the rest). */
export function errorJson(error: unknown): ControllerErrorJson {
  if (isControllerError(error)) return escapeDeep(error.toJSON());
  return {
    name: "ControllerError",
    code: "CONTROLLER_INTERNAL",
    message: escapeControlChars(error instanceof Error ? error.message : String(error)),
  };
}

/** Options of {@link SnapshotPoller}. */
export interface PollerOptions {
  /** Poll interval while a page listens, in ms. */
  activeMs?: number;
  /** Poll interval otherwise, in ms. */
  idleMs?: number;
  /** Whether the action layer has `diff` (the page offers diff stats then). */
  diff?: boolean;
  /**
   * Says, at each poll while a page listens, that the dashboard can answer the egress asks of
   * these running instances (their guests' requests then wait for the page instead of failing).
   */
  present?: (names: string[]) => Promise<void>;
  /** Lists the other contexts' instances (contexts.ts); each poll starts it without waiting for it. */
  contexts?: { poll(): Promise<ContextInstances[] | undefined> };
}

/**
 * Polls `list` for instances and templates; keeps the sparklines' history; tells subscribers
 * after each poll. Polls every `activeMs` while a page listens, every `idleMs` otherwise (the
 * sparkline still covers the last 10 minutes when a page is opened).
 */
export class SnapshotPoller {
  readonly #call: CallFn;
  readonly #activeMs: number;
  readonly #idleMs: number;
  readonly #listeners = new Set<(snapshot: DashboardSnapshot) => void>();
  readonly #history = new Map<string, UsageSample[]>();
  readonly #branches: BranchReader;
  readonly #diff: boolean;
  readonly #present: PollerOptions["present"];
  readonly #contexts: PollerOptions["contexts"];
  #snapshot: DashboardSnapshot;
  #timer: NodeJS.Timeout | undefined;
  #inFlight: Promise<void> | undefined;
  #closed = false;

  constructor(call: CallFn, options: PollerOptions = {}) {
    this.#call = call;
    this.#activeMs = options.activeMs ?? 2_000;
    this.#idleMs = options.idleMs ?? 10_000;
    this.#branches = new BranchReader(call);
    this.#diff = options.diff === true;
    this.#present = options.present;
    this.#contexts = options.contexts;
    this.#snapshot = {
      instances: [],
      contexts: [],
      templates: [],
      history: {},
      branches: {},
      diff: this.#diff,
      egress: {},
      at: new Date(0).toISOString(),
    };
  }

  /** The latest snapshot. */
  get snapshot(): DashboardSnapshot {
    return this.#snapshot;
  }

  /** Starts polling (the first poll at once). */
  start(): void {
    void this.refresh();
  }

  /** Calls `listener` after every poll until the returned function is called; polls at once. */
  subscribe(listener: (snapshot: DashboardSnapshot) => void): () => void {
    this.#listeners.add(listener);
    void this.refresh();
    return () => this.#listeners.delete(listener);
  }

  /** Polls now (joining a poll already running), then on the timer again. */
  refresh(): Promise<void> {
    this.#inFlight ??= this.#poll().finally(() => {
      this.#inFlight = undefined;
      if (this.#closed) return;
      clearTimeout(this.#timer);
      this.#timer = setTimeout(() => void this.refresh(), this.#listeners.size > 0 ? this.#activeMs : this.#idleMs);
      this.#timer.unref();
    });
    return this.#inFlight;
  }

  /** Stops polling. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#listeners.clear();
  }

  async #poll(): Promise<void> {
    const now = Date.now();
    // Another machine is asked only while a page is open: an idle dashboard keeps no ssh going.
    if (this.#listeners.size > 0) void this.#pollContexts();
    try {
      const [instances, templates] = (await Promise.all([
        this.#call({ action: "list" }),
        this.#call({ action: "list", kind: "templates" }),
      ])) as [{ instances: EntryView[] }, { templates: EntryView[] }];
      this.#record(instances.instances, now);
      const branches = await this.#branches.read(instances.instances);
      const egress = await this.#egress(instances.instances);
      this.#snapshot = escapeDeep({
        instances: instances.instances.map((view) => ({ ...view, context: "local" })),
        contexts: this.#snapshot.contexts,
        templates: templates.templates,
        history: Object.fromEntries(this.#history),
        branches,
        diff: this.#diff,
        egress,
        at: new Date(now).toISOString(),
      });
    } catch (error) {
      this.#snapshot = { ...this.#snapshot, at: new Date(now).toISOString(), error: errorJson(error) };
    }
    for (const listener of this.#listeners) listener(this.#snapshot);
  }

  /** Lists the other contexts; when they answer (or time out), the page gets them at once. */
  async #pollContexts(): Promise<void> {
    const contexts = await this.#contexts?.poll();
    if (!contexts || this.#closed) return;
    this.#snapshot = { ...this.#snapshot, contexts };
    for (const listener of this.#listeners) listener(this.#snapshot);
  }

  /** The asks of the running instances; while a page listens, first says the dashboard can answer them. */
  async #egress(views: EntryView[]): Promise<Record<string, EgressAsk[]>> {
    const running = views.filter((view) => view.state === "running").map((view) => view.name);
    if (this.#listeners.size > 0) await this.#present?.(running).catch(() => undefined);
    const asks = await Promise.all(
      running.map(async (name) => {
        const view = (await this.#call({ action: "egress", name, waiting: true }).catch(() => undefined)) as
          { waiting?: EgressAsk[] } | undefined;
        return [name, view?.waiting ?? []] as const;
      }),
    );
    return Object.fromEntries(asks.filter(([, waiting]) => waiting.length > 0));
  }

  #record(views: EntryView[], now: number): void {
    const names = new Set(views.map((view) => view.name));
    for (const name of this.#history.keys()) if (!names.has(name)) this.#history.delete(name);
    for (const view of views) {
      const samples = (this.#history.get(view.name) ?? []).filter((sample) => sample.t > now - HISTORY_MS);
      if (view.usage) samples.push({ t: now, cpu: view.usage.cpuPercent, rss: view.usage.rssBytes });
      if (samples.length > 0) this.#history.set(view.name, samples);
      else this.#history.delete(view.name);
    }
  }
}
