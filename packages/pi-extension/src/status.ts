// The footer: which instances run and their preview URLs, the dashboard's link once it runs, what
// Pi is attached to, and the context when the calls go to another machine. Refreshed every few
// seconds while a session with a UI is open (the timer starts in session_start and ends in
// session_shutdown), after each sandbox call and after attach, detach and /sandbox. A state root that does not exist yet is left alone: looking never creates
// sandbox state, and never starts a dashboard.

import { existsSync } from "node:fs";
import { join } from "node:path";
import type { ExtensionContext } from "@earendil-works/pi-coding-agent";
import {
  escapeControlChars,
  resolveStateRoot,
  type DashboardAbsent,
  type DashboardInfo,
  type EntryView,
} from "@pi-sandbox/controller/client";
import { ATTACH_STATUS, type Attachments } from "./attach.js";
import { contextStatus } from "./context-command.js";
import type { SandboxDependencies } from "./tool.js";

/** Footer status key of the running instances. */
export const INSTANCES_STATUS = "pi-sandbox.instances";
/** Footer status key of the context (another machine) the calls go to. */
export const CONTEXT_STATUS = "pi-sandbox.context";
/** Footer status key of the dashboard's link. */
export const DASHBOARD_STATUS = "pi-sandbox.dashboard";
/** How often the footer looks again, in ms. */
export const REFRESH_MS = 5_000;
/** Most instances named in the footer; the rest are counted. */
const SHOWN_MAX = 3;
/** States in which an attached instance is given up (a busy daemon reads `unavailable` and is kept). */
const GONE_STATES = new Set(["stopped", "stopping", "suspended", "suspending", "interrupted", "failed", "prepared"]);

/**
 * Whether an attached instance is gone for Pi (stopped, failed, …). One that suspended itself while
 * unused is not: its previews and the next action resume it.
 */
export function isGone(entry: EntryView): boolean {
  return GONE_STATES.has(entry.state) && !entry.idle?.suspended;
}

/** The footer text for the running instances (those suspended while unused marked idle), or undefined when none runs. */
export function instancesStatus(instances: readonly EntryView[]): string | undefined {
  const running = instances.filter((i) => i.state === "running" || i.idle?.suspended);
  if (running.length === 0) return undefined;
  const shown = running.slice(0, SHOWN_MAX).map((i) => {
    const name = i.idle?.suspended ? `${i.name} (idle)` : i.name;
    const url = i.previews[0]?.url;
    const more = i.previews.length > 1 ? ` +${i.previews.length - 1}` : "";
    return escapeControlChars(url ? `${name} ${url}${more}` : name);
  });
  const rest = running.length > SHOWN_MAX ? ` · +${running.length - SHOWN_MAX} more` : "";
  return `sandbox: ${shown.join(" · ")}${rest}`;
}

/** Keeps the footer current for one session. */
export class SandboxStatus {
  #timer: NodeJS.Timeout | undefined;
  #ctx: ExtensionContext | undefined;
  #busy: Promise<void> | undefined;

  constructor(
    private readonly deps: SandboxDependencies,
    private readonly attachments: Attachments,
  ) {}

  /** Starts the periodic refresh (only with a UI: print mode has no footer). */
  start(ctx: ExtensionContext): void {
    this.stop();
    if (!ctx.hasUI) return;
    this.#ctx = ctx;
    void this.refresh(ctx);
    this.#timer = setInterval(() => {
      try {
        void this.refresh();
      } catch {
        // A session that ended without session_shutdown (an embedder disposed it) has a stale ctx.
        this.stop();
      }
    }, REFRESH_MS);
    this.#timer.unref();
  }

  /** Stops the refresh; the instances keep running. */
  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#ctx = undefined;
  }

  /** Looks at the instances now; overlapping calls share one look. */
  refresh(ctx: ExtensionContext | undefined = this.#ctx): Promise<void> {
    if (!ctx?.hasUI) return Promise.resolve();
    this.#busy ??= this.#look(ctx).finally(() => (this.#busy = undefined));
    return this.#busy;
  }

  async #look(ctx: ExtensionContext): Promise<void> {
    let instances: EntryView[] | undefined;
    let dashboard: string | undefined;
    let context: string | undefined;
    const began = Date.now();
    try {
      const root = resolveStateRoot(this.deps.env ?? process.env);
      context = await contextStatus(this.deps).catch(() => undefined);
      // Another machine's instances are looked at there; this machine's only once it has any.
      if (context !== undefined || existsSync(join(root, "instances"))) {
        // Best effort apart from the instances: an older controller without the action shows none.
        dashboard = await this.#dashboardUrl().catch(() => undefined);
        const listed = (await this.deps.callAction({ action: "list" }, { env: this.deps.env })) as {
          instances?: EntryView[];
        };
        instances = listed.instances ?? [];
      } else {
        instances = [];
      }
    } catch {
      // The footer is best effort: a failed look leaves it as it was.
      return;
    }
    const attached = this.attachments.name;
    if (attached !== undefined) {
      const entry = instances.find((i) => i.name === attached);
      // A rewind or fork by the extension stops or suspends the instance for a while: not gone.
      if ((!entry || isGone(entry)) && !this.attachments.heldSince(attached, began)) {
        this.attachments.detach(ctx, entry ? `${attached} is ${entry.state}` : `${attached} was destroyed`);
      }
    }
    try {
      ctx.ui.setStatus(CONTEXT_STATUS, context);
      ctx.ui.setStatus(INSTANCES_STATUS, instancesStatus(instances));
      ctx.ui.setStatus(DASHBOARD_STATUS, dashboard === undefined ? undefined : `dashboard: ${dashboard}`);
      this.showAttach(ctx);
    } catch {
      // A session that ended meanwhile has no UI to update.
    }
  }

  /**
   * The running dashboard's address without a token, or undefined; never starts one. A link opens
   * one browser session within 10 minutes, so the footer shows none: the address works in the
   * browser that already has a session, and elsewhere its page says to run `/sandbox dashboard`.
   */
  async #dashboardUrl(): Promise<string | undefined> {
    const found = (await this.deps.callAction({ action: "dashboard", status: true }, { env: this.deps.env })) as
      DashboardInfo | DashboardAbsent;
    return "url" in found ? `${new URL(found.url).origin}/ (a new link: /sandbox dashboard)` : undefined;
  }

  /** Shows or clears `attached: <name>`. */
  showAttach(ctx: ExtensionContext): void {
    if (!ctx.hasUI) return;
    const name = this.attachments.name;
    ctx.ui.setStatus(ATTACH_STATUS, name === undefined ? undefined : `attached: ${name}`);
  }
}
