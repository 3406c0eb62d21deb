// /fork and /clone with the environment. While attached, Pi's /fork and /clone ask whether the new
// session gets a fork of the instance: as it was at the point the new session starts from (the
// checkpoint branching.ts finds for that point), or as it is now when the instance is at that
// point already or no checkpoint holds it. The fork is made when the new session starts, not when
// it is asked for: another extension may still cancel the /fork after ours answered, and a fork
// made for a session that never came would be left behind. The new session then attaches to it.

import { randomBytes } from "node:crypto";
import type {
  ExtensionAPI,
  ExtensionContext,
  SessionBeforeForkEvent,
  SessionBeforeForkResult,
  SessionStartEvent,
} from "@earendil-works/pi-coding-agent";
import { escapeControlChars } from "@pi-sandbox/controller/client";
import { ATTACH_ENTRY, describeError, tellUser, type Attachments } from "./attach.js";

/** The choices /fork and /clone offer while attached. */
export const FORK_CHOICES = ["fork the environment", "keep the environment as it is"] as const;

/** How long a fork asked for by /fork waits for its new session to start. */
const HANDOFF_MS = 10 * 60_000;
const HANDOFF_KEY = Symbol.for("pi-sandbox.fork-handoff");

/** The fork the session /fork or /clone is making gets, made once that session starts. */
interface ForkHandoff {
  source: string;
  fork: string;
  /** The kept checkpoint of the point the new session starts from, and that point in words. */
  from?: { id: string; what: string };
  at: number;
}

// Pi replaces the extension's runtime with the new session's: the handoff outlives it here.
const handoffs = globalThis as unknown as Record<typeof HANDOFF_KEY, ForkHandoff | undefined>;

/** A fork name: `<name>-<6 hex>`, within the 40 characters an instance name may have. */
export function forkNameFor(name: string): string {
  return `${name.slice(0, 33)}-${randomBytes(3).toString("hex")}`;
}

/** What the fork flow needs of the session's branches (branching.ts). */
export interface ForkPoints {
  /**
   * The checkpoint holding `name` at `point` (null: before the first entry): undefined when the
   * instance is there now, null when no checkpoint holds it.
   */
  checkpointAt(
    name: string,
    point: string | null,
    ctx: ExtensionContext,
  ): Promise<{ id: string; what: string } | null | undefined>;
  /** Calls a controller action for the user. */
  call<T>(action: Record<string, unknown>, ctx: ExtensionContext): Promise<T>;
}

/** /fork and /clone for one session runtime. */
export class SessionForks {
  constructor(
    private readonly pi: ExtensionAPI,
    private readonly attachments: Attachments,
    private readonly points: ForkPoints,
  ) {}

  /** session_before_fork: asks, and remembers the answer for the session about to start. */
  async beforeFork(event: SessionBeforeForkEvent, ctx: ExtensionContext): Promise<SessionBeforeForkResult | undefined> {
    handoffs[HANDOFF_KEY] = undefined;
    const name = this.attachments.name;
    if (!ctx.hasUI || name === undefined) return undefined;
    // "before" a user message: the new session ends at its parent; "at": at the entry itself.
    const entry = ctx.sessionManager.getEntry(event.entryId);
    const point = event.position === "at" || !entry ? event.entryId : entry.parentId;
    const from = await this.points.checkpointAt(name, point, ctx);
    const how = from
      ? ` as it was at this point (checkpoint ${from.id}, ${from.what})`
      : from === null
        ? " (as it is now, with what later turns changed)"
        : "";
    const choice = await ctx.ui.select(
      escapeControlChars(
        `Fork the environment ${name} for the new session${how}? Without a fork, both sessions work in ${name}.`,
      ),
      [...FORK_CHOICES],
    );
    if (choice !== FORK_CHOICES[0]) return undefined;
    handoffs[HANDOFF_KEY] = { source: name, fork: forkNameFor(name), ...(from ? { from } : {}), at: Date.now() };
    return undefined;
  }

  /**
   * On session_start: a session that /fork or /clone made with a forked environment gets the fork
   * now and attaches to it. Returns true when it took the session's attach over (nothing else to
   * restore). A fork that fails leaves the session unattached, saying why.
   */
  async sessionStarted(event: SessionStartEvent, ctx: ExtensionContext): Promise<boolean> {
    const handoff = handoffs[HANDOFF_KEY];
    handoffs[HANDOFF_KEY] = undefined;
    if (event.reason !== "fork" || !handoff || Date.now() - handoff.at > HANDOFF_MS) return false;
    const { source, fork, from } = handoff;
    tellUser(
      ctx,
      `Forking ${source} into ${fork} for this session${from ? ` as it was at checkpoint ${from.id} (${from.what})` : ""}…`,
      "info",
    );
    try {
      await this.attachments.holding(source, () =>
        this.points.call({ action: "fork", name: source, names: [fork], ...(from ? { from: from.id } : {}) }, ctx),
      );
    } catch (error) {
      this.pi.appendEntry(ATTACH_ENTRY, { name: null });
      tellUser(
        ctx,
        `${describeError(error)}\nNo fork was made; this session is not attached to an instance (the tools stay on the host).`,
        "error",
      );
      return true;
    }
    try {
      const at = from ? ` at checkpoint ${from.id}` : "";
      await this.attachments.attach(fork, ctx, { note: `a fork of ${source}${at} made for this session` });
    } catch (error) {
      this.pi.appendEntry(ATTACH_ENTRY, { name: null });
      tellUser(
        ctx,
        `The fork ${fork} was made, but this session could not attach to it; the tools stay on the host.\n${describeError(error)}`,
        "warning",
      );
    }
    return true;
  }
}
