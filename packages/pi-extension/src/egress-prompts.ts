// Egress approvals in Pi. While a session with a UI is open, the instances it uses (the attached
// one, and those named in this session's sandbox calls) are watched: Pi tells the controller it
// can answer, so their guests' requests to hosts off allowedHosts wait for the user instead of
// failing, and each host waiting is put to the user in a select. The answer goes to the controller
// as the user's (via Pi); the model never sees the question and has no way to answer it. When the
// session's calls go to another machine (a context), the same is done there through the context:
// `egress-watch` says this session can answer and brings what waits, and the answer goes back
// through the context, recorded in this machine's ledger of it as any call through it is.

import { randomBytes } from "node:crypto";
import type { ExtensionContext } from "@earendil-works/pi-coding-agent";
import {
  ANSWERER_FRESH_MS,
  StateLayout,
  dropEgressAnswerer,
  escapeControlChars,
  markEgressAnswerer,
  readEgressAsks,
  type EgressAsk,
} from "@pi-sandbox/controller/client";
import { sessionContexts } from "./context-command.js";
import type { SandboxDependencies } from "./tool.js";

/** The select's choices, in order. */
export const EGRESS_CHOICES = ["Allow once", "Allow for this instance", "Deny"] as const;
/** How often the watched instances are looked at, in ms. */
export const EGRESS_LOOK_MS = 1_000;
/** How often Pi says again that it can answer (well within ANSWERER_FRESH_MS), in ms. */
const MARK_EVERY_MS = ANSWERER_FRESH_MS / 3;

/** The most instances one look through a context names (egress-watch's limit). */
const WATCH_MAX = 100;

/**
 * The select's title for one waiting host, of an instance here or (`context`) of another machine;
 * the host is the guest's text, escaped.
 */
export function egressQuestion(name: string, ask: EgressAsk, context = "local"): string {
  const more = ask.waiting > 1 ? ` (${ask.waiting} requests wait)` : "";
  const where = context === "local" ? "" : ` on ${context}`;
  return escapeControlChars(
    `${name}${where} wants to reach ${ask.host}:${ask.port} (${ask.protocol.toUpperCase()} ${ask.method}), which its allowedHosts do not list${more}. Let it?`,
  );
}

/** Watches the instances of one session and asks the user about their waiting hosts. */
export class EgressPrompts {
  readonly #used = new Set<string>();
  readonly #id = `${process.pid}-${randomBytes(4).toString("hex")}`;
  /** Dialogs open, by `context name host`, each dismissed when its ask is gone (answered elsewhere, or past its deadline). */
  readonly #open = new Map<string, AbortController>();
  readonly #marked = new Map<string, number>();
  #timer: NodeJS.Timeout | undefined;
  #ctx: ExtensionContext | undefined;
  #looking = false;
  /** One dialog at a time: the next waits for the one before. */
  #dialogs: Promise<void> = Promise.resolve();

  constructor(
    private readonly deps: SandboxDependencies,
    private readonly attached: () => string | undefined,
  ) {}

  #layout(): StateLayout {
    return StateLayout.fromEnv(this.deps.env ?? process.env);
  }

  /** Starts watching (only with a UI: in print mode nobody could answer, so requests are refused at once). */
  start(ctx: ExtensionContext): void {
    this.stop();
    if (!ctx.hasUI) return;
    this.#ctx = ctx;
    this.#timer = setInterval(() => void this.#look(), EGRESS_LOOK_MS);
    this.#timer.unref();
  }

  /**
   * Stops watching: this machine's controller no longer counts this session as someone who can
   * answer (another machine's stops within ANSWERER_FRESH_MS of the last look).
   */
  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#ctx = undefined;
    for (const dialog of this.#open.values()) dialog.abort();
    const layout = this.#layout();
    for (const name of this.#marked.keys())
      void dropEgressAnswerer(layout, name, "pi", this.#id).catch(() => undefined);
    this.#marked.clear();
  }

  /**
   * An instance this session uses: watched from now on. Awaited before the call that names it, so
   * a request its guest makes during that call already finds someone to ask.
   */
  async use(name: string): Promise<void> {
    this.#used.add(name);
    if (!this.#ctx) return;
    const context = await this.#context();
    if (context === "local") await this.#mark(this.#layout(), name, true);
    // There: sent ahead of the call on the same connection, not waited for (a context that cannot
    // be reached is the call's to report, not twice).
    else void this.#watchThere(context, [name]).catch(() => undefined);
  }

  /** The context this session's calls go to now (`local`, also when the contexts cannot be read). */
  async #context(): Promise<string> {
    return (await sessionContexts(this.deps).catch(() => undefined))?.current ?? "local";
  }

  /**
   * Says there, through the context, that this session can answer for `names`, and returns what
   * waits (a mark there lapses {@link ANSWERER_FRESH_MS} after the last look, as here).
   */
  async #watchThere(context: string, names: readonly string[]): Promise<Map<string, EgressAsk[]>> {
    const result = (await this.deps.callAction(
      { action: "egress-watch", names: names.slice(0, WATCH_MAX), id: this.#id, by: "pi" },
      { env: this.deps.env, caller: "user", via: "pi", context },
    )) as { waiting?: Record<string, unknown> } | undefined;
    const waiting = new Map<string, EgressAsk[]>();
    for (const name of names) {
      const asks = result?.waiting?.[name];
      if (Array.isArray(asks)) waiting.set(name, asks.filter(isAsk));
    }
    return waiting;
  }

  /** What waits for `names` here, each marked as watched by this session. */
  async #waitingHere(names: Iterable<string>): Promise<Map<string, EgressAsk[]>> {
    const layout = this.#layout();
    const waiting = new Map<string, EgressAsk[]>();
    for (const name of names) {
      await this.#mark(layout, name);
      waiting.set(name, await readEgressAsks(layout, name).catch(() => []));
    }
    return waiting;
  }

  async #mark(layout: StateLayout, name: string, now = false): Promise<void> {
    if (!now && Date.now() - (this.#marked.get(name) ?? 0) < MARK_EVERY_MS) return;
    this.#marked.set(name, Date.now());
    await markEgressAnswerer(layout, name, "pi", this.#id).catch(() => undefined);
  }

  async #look(): Promise<void> {
    const ctx = this.#ctx;
    if (!ctx || this.#looking) return;
    this.#looking = true;
    try {
      const attached = this.attached();
      const names = new Set([...this.#used, ...(attached ? [attached] : [])]);
      const context = await this.#context();
      const asks =
        context === "local"
          ? await this.#waitingHere(names)
          : names.size > 0
            ? // A context that cannot be reached now: nothing is asked until it can.
              await this.#watchThere(context, [...names]).catch(() => new Map<string, EgressAsk[]>())
            : new Map<string, EgressAsk[]>();
      const waiting = new Set<string>();
      for (const [name, list] of asks) {
        for (const ask of list) {
          const key = `${context} ${name} ${ask.host}`;
          waiting.add(key);
          if (!this.#open.has(key)) this.#ask(ctx, context, name, ask, key);
        }
      }
      for (const [key, dialog] of this.#open) if (!waiting.has(key)) dialog.abort();
    } finally {
      this.#looking = false;
    }
  }

  #ask(ctx: ExtensionContext, context: string, name: string, ask: EgressAsk, key: string): void {
    const dialog = new AbortController();
    this.#open.set(key, dialog);
    this.#dialogs = this.#dialogs
      .then(async () => {
        const left = Date.parse(ask.until) - Date.now();
        if (dialog.signal.aborted || left <= 0) return;
        const choice = await ctx.ui.select(egressQuestion(name, ask, context), [...EGRESS_CHOICES], {
          signal: dialog.signal,
          timeout: left,
        });
        if (choice === undefined) return;
        const action =
          choice === "Deny"
            ? { action: "egress-deny", name, host: ask.host }
            : { action: "egress-approve", name, host: ask.host, ...(choice === "Allow once" ? { once: true } : {}) };
        // To the machine that asked, whatever the session follows by now.
        await this.deps.callAction(action, { env: this.deps.env, caller: "user", via: "pi", context });
      })
      .catch((error: unknown) => {
        // Answered elsewhere meanwhile (the dashboard, the CLI) or the instance stopped: nothing to do.
        const message = error instanceof Error ? error.message : String(error);
        const where = context === "local" ? "" : ` on ${context}`;
        if (this.#ctx) ctx.ui.notify(escapeControlChars(`Could not answer for ${name}${where}: ${message}`), "warning");
      })
      .finally(() => {
        if (this.#open.get(key) === dialog) this.#open.delete(key);
      });
  }
}

/** An ask as another machine sent it: the fields the dialog shows, of the types it needs. */
function isAsk(value: unknown): value is EgressAsk {
  const ask = value as Partial<Record<keyof EgressAsk, unknown>> | null;
  return (
    typeof ask === "object" &&
    ask !== null &&
    typeof ask.host === "string" &&
    typeof ask.port === "number" &&
    typeof ask.protocol === "string" &&
    typeof ask.method === "string" &&
    typeof ask.waiting === "number" &&
    typeof ask.until === "string"
  );
}
