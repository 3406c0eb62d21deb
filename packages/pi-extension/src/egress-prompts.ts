// Egress approvals in Pi. While a session with a UI is open, the instances it uses (the attached
// one, and those named in this session's sandbox calls) are watched: Pi tells the controller it
// can answer, so their guests' requests to hosts off allowedHosts wait for the user instead of
// failing, and each host waiting is put to the user in a select. The answer goes to the controller
// as the user's (via Pi); the model never sees the question and has no way to answer it.

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
import type { SandboxDependencies } from "./tool.js";

/** The select's choices, in order. */
export const EGRESS_CHOICES = ["Allow once", "Allow for this instance", "Deny"] as const;
/** How often the watched instances are looked at, in ms. */
export const EGRESS_LOOK_MS = 1_000;
/** How often Pi says again that it can answer (well within ANSWERER_FRESH_MS), in ms. */
const MARK_EVERY_MS = ANSWERER_FRESH_MS / 3;

/** The select's title for one waiting host; the host is the guest's text, escaped. */
export function egressQuestion(name: string, ask: EgressAsk): string {
  const more = ask.waiting > 1 ? ` (${ask.waiting} requests wait)` : "";
  return escapeControlChars(
    `${name} wants to reach ${ask.host}:${ask.port} (${ask.protocol.toUpperCase()} ${ask.method}), which its allowedHosts do not list${more}. Let it?`,
  );
}

/** Watches the instances of one session and asks the user about their waiting hosts. */
export class EgressPrompts {
  readonly #used = new Set<string>();
  readonly #id = `${process.pid}-${randomBytes(4).toString("hex")}`;
  /** Dialogs open, by `name host`, each dismissed when its ask is gone (answered elsewhere, or past its deadline). */
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

  /** Stops watching: the controller no longer counts this session as someone who can answer. */
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
    if (this.#ctx) await this.#mark(this.#layout(), name, true);
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
      const layout = this.#layout();
      const attached = this.attached();
      const names = new Set([...this.#used, ...(attached ? [attached] : [])]);
      const waiting = new Set<string>();
      for (const name of names) {
        await this.#mark(layout, name);
        for (const ask of await readEgressAsks(layout, name).catch(() => [])) {
          const key = `${name} ${ask.host}`;
          waiting.add(key);
          if (!this.#open.has(key)) this.#ask(ctx, name, ask, key);
        }
      }
      for (const [key, dialog] of this.#open) if (!waiting.has(key)) dialog.abort();
    } finally {
      this.#looking = false;
    }
  }

  #ask(ctx: ExtensionContext, name: string, ask: EgressAsk, key: string): void {
    const dialog = new AbortController();
    this.#open.set(key, dialog);
    this.#dialogs = this.#dialogs
      .then(async () => {
        const left = Date.parse(ask.until) - Date.now();
        if (dialog.signal.aborted || left <= 0) return;
        const choice = await ctx.ui.select(egressQuestion(name, ask), [...EGRESS_CHOICES], {
          signal: dialog.signal,
          timeout: left,
        });
        if (choice === undefined) return;
        const action =
          choice === "Deny"
            ? { action: "egress-deny", name, host: ask.host }
            : { action: "egress-approve", name, host: ask.host, ...(choice === "Allow once" ? { once: true } : {}) };
        await this.deps.callAction(action, { env: this.deps.env, caller: "user", via: "pi" });
      })
      .catch((error: unknown) => {
        // Answered elsewhere meanwhile (the dashboard, the CLI) or the instance stopped: nothing to do.
        const message = error instanceof Error ? error.message : String(error);
        if (this.#ctx) ctx.ui.notify(escapeControlChars(`Could not answer for ${name}: ${message}`), "warning");
      })
      .finally(() => {
        if (this.#open.get(key) === dialog) this.#open.delete(key);
      });
  }
}
