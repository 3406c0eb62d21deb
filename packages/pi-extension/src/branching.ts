// The environment moves with Pi's conversation. Before the first tool call of a run that may change
// an instance (a routed bash, write or edit while attached; the sandbox tool's exec, write or
// upload), the instance's disk is kept as a checkpoint labelled with the run's user message
// (branch-points.ts says what a label means and how a point finds its checkpoint). /tree to another
// point keeps the state at the tip it leaves and offers to rewind the instance to that point's
// checkpoint; /fork and /clone offer to fork the attached instance for the new session, as it was at
// the point that session starts from (session-forks.ts), which is then attached to the fork.
// Without a UI (print and JSON modes) nothing is asked, rewound or forked, and only the attached
// instance gets checkpoints.

import type {
  ExtensionAPI,
  ExtensionContext,
  SessionBeforeForkEvent,
  SessionBeforeForkResult,
  SessionBeforeTreeEvent,
  SessionBeforeTreeResult,
  SessionStartEvent,
} from "@earendil-works/pi-coding-agent";
import { escapeControlChars, isControllerError } from "@pi-sandbox/controller/client";
import { ATTACH_ENTRY, describeError, tellUser, type Attachments } from "./attach.js";
import {
  describeLabel,
  labelEntry,
  leafAfterNavigation,
  pointLabel,
  resolvePoint,
  runEntry,
  type CheckpointInfo,
  type TreeEntry,
} from "./branch-points.js";
import { peekAction } from "./input.js";
import { SessionForks } from "./session-forks.js";
import type { SandboxDependencies } from "./tool.js";

export { FORK_CHOICES } from "./session-forks.js";

/** The choices /tree offers when the point it goes to has a checkpoint. */
export const REWIND_CHOICES = ["rewind the environment", "keep the environment as it is"] as const;

/** Pi's tools that may change an attached instance (read, grep, find and ls only look). */
const CHANGING_TOOLS = new Set(["bash", "write", "edit"]);
/** Sandbox actions that change a running instance's disk: a checkpoint is kept before them. */
const CHANGING_ACTIONS = new Set(["exec", "write", "upload"]);
/** Sandbox actions that leave an instance as it was; any other may have changed it. */
const LOOKING_ACTIONS = new Set([
  "help",
  "list",
  "inspect",
  "logs",
  "read",
  "download",
  "checkpoint",
  "checkpoints",
  "exec-status",
  "services",
  "secrets",
  "preview",
  "shell",
  "dashboard",
  "doctor",
]);
/** Most instances /tree looks at (the attached one first). */
const TREE_INSTANCES_MAX = 8;

/** What the extension knows about one instance's state against its checkpoints. */
interface Track {
  /** Something that may change it ran since `last` (true until a checkpoint or rewind is known). */
  changed: boolean;
  /** The checkpoint its state equals, when nothing ran since. */
  last?: string;
  /** A failed checkpoint was reported to the user already (once per session). */
  warned?: boolean;
  /** The last failure, for /sandbox checkpoints. */
  failure?: string;
}

function entriesOf(ctx: ExtensionContext): TreeEntry[] {
  return ctx.sessionManager.getEntries() as unknown as TreeEntry[];
}

/** The extension's checkpoints, rewinds and forks for one session runtime. */
export class EnvironmentBranches {
  #tracks = new Map<string, Track>();
  /** The leaf when the current run started (undefined outside a run). */
  #runStart: string | null | undefined;
  /** Instances already handled in the current run (one checkpoint per run and instance). */
  #runDone = new Set<string>();
  /** /fork and /clone (session-forks.ts). */
  readonly #forks: SessionForks;

  constructor(
    pi: ExtensionAPI,
    private readonly deps: SandboxDependencies,
    private readonly attachments: Attachments,
  ) {
    this.#forks = new SessionForks(pi, attachments, this);
  }

  /** /fork and /clone: asks whether the new session gets a fork of the attached instance. */
  beforeFork(event: SessionBeforeForkEvent, ctx: ExtensionContext): Promise<SessionBeforeForkResult | undefined> {
    return this.#forks.beforeFork(event, ctx);
  }

  /** On session_start: a session /fork or /clone made gets its fork; true when that took the attach over. */
  sessionStarted(event: SessionStartEvent, ctx: ExtensionContext): Promise<boolean> {
    return this.#forks.sessionStarted(event, ctx);
  }

  #track(name: string): Track {
    let track = this.#tracks.get(name);
    if (!track) {
      track = { changed: true };
      this.#tracks.set(name, track);
    }
    return track;
  }

  #call<T>(action: Record<string, unknown>, ctx: ExtensionContext, signal?: AbortSignal): Promise<T> {
    return this.deps.callAction(action, {
      cwd: ctx.cwd,
      env: this.deps.env,
      signal,
      caller: "user",
      via: "pi",
    }) as Promise<T>;
  }

  async #list(name: string, ctx: ExtensionContext): Promise<CheckpointInfo[]> {
    const listed = await this.#call<{ checkpoints?: CheckpointInfo[] }>({ action: "checkpoints", name }, ctx);
    return listed.checkpoints ?? [];
  }

  /** A run begins: its checkpoints are labelled with the entry that follows this leaf. */
  runStarted(ctx: ExtensionContext): void {
    this.#runStart = ctx.sessionManager.getLeafId();
    this.#runDone.clear();
  }

  runEnded(): void {
    this.#runStart = undefined;
    this.#runDone.clear();
  }

  /** The user's own `!command` ran in the attached instance. */
  userBash(): void {
    const name = this.attachments.name;
    if (name !== undefined) this.#track(name).changed = true;
  }

  /**
   * Before a tool runs: keeps a checkpoint of the instance it may change, once per run and
   * instance. Never blocks the call; a failed checkpoint is reported once and the turn goes on.
   */
  async beforeToolCall(event: { toolName: string; input: Record<string, unknown> }, ctx: ExtensionContext) {
    try {
      await this.#beforeToolCall(event, ctx);
    } catch {
      // Keeping checkpoints never stands in a tool call's way (a UI that went away, a bug).
    }
  }

  async #beforeToolCall(event: { toolName: string; input: Record<string, unknown> }, ctx: ExtensionContext) {
    let target: string | undefined;
    let touched: string | undefined;
    if (CHANGING_TOOLS.has(event.toolName)) {
      target = this.attachments.name;
    } else if (event.toolName === "sandbox") {
      const peek = peekAction(event.input.input);
      if (peek.name !== undefined && !LOOKING_ACTIONS.has(peek.action)) touched = peek.name;
      const mine = ctx.hasUI || peek.name === this.attachments.name;
      if (peek.name !== undefined && CHANGING_ACTIONS.has(peek.action) && mine) target = peek.name;
    }
    if (target !== undefined) {
      await this.#beforeChange(target, ctx);
      this.#track(target).changed = true;
    }
    if (touched !== undefined) this.#track(touched).changed = true;
  }

  async #beforeChange(name: string, ctx: ExtensionContext): Promise<void> {
    if (this.#runDone.has(name)) return;
    this.#runDone.add(name);
    const track = this.#track(name);
    const start = this.#runStart === undefined ? ctx.sessionManager.getLeafId() : this.#runStart;
    try {
      // Nothing ran since the last checkpoint, and this point already maps to it: none needed.
      if (!track.changed && track.last !== undefined) {
        const found = resolvePoint(entriesOf(ctx), await this.#list(name, ctx), start);
        if (found?.checkpoint.id === track.last) return;
      }
      const label = pointLabel(runEntry(ctx.sessionManager.getBranch() as unknown as TreeEntry[], start));
      const taken = await this.#call<{ checkpoint: CheckpointInfo }>(
        { action: "checkpoint", name, label },
        ctx,
        ctx.signal,
      );
      track.last = taken.checkpoint.id;
      track.changed = false;
    } catch (error) {
      // An instance that does not exist has nothing to keep (the call itself will say so), and a
      // turn the user interrupted has no tool call left to run.
      if (isControllerError(error) && error.code === "CONTROLLER_NOT_FOUND") return;
      if (ctx.signal?.aborted) return;
      track.failure = describeError(error);
      if (track.warned) return;
      track.warned = true;
      tellUser(
        ctx,
        `Could not keep a checkpoint of ${name} before this turn (the turn goes on; /tree cannot rewind ${name} to this point):\n${track.failure}`,
        "warning",
      );
    }
  }

  /** Instances /tree looks at: the attached one, those this session checkpointed or named in sandbox calls. */
  #instancesOfSession(ctx: ExtensionContext): string[] {
    const names = new Set<string>();
    if (this.attachments.name !== undefined) names.add(this.attachments.name);
    for (const name of this.#tracks.keys()) names.add(name);
    for (const entry of ctx.sessionManager.getEntries()) {
      if (entry.type === "custom" && entry.customType === ATTACH_ENTRY) {
        const name = (entry.data as { name?: unknown } | undefined)?.name;
        if (typeof name === "string") names.add(name);
      }
      if (entry.type === "message" && entry.message.role === "toolResult" && entry.message.toolName === "sandbox") {
        const name = (entry.message.details as { name?: unknown } | undefined)?.name;
        if (typeof name === "string") names.add(name);
      }
    }
    return [...names].slice(0, TREE_INSTANCES_MAX);
  }

  /**
   * Keeps the state at the tip being left, unless it is known to be kept already. Returns whether
   * the tip's state is now held by a checkpoint this package labelled.
   */
  async #keepTip(name: string, tip: string | null, ctx: ExtensionContext): Promise<boolean> {
    const track = this.#track(name);
    try {
      if (!track.changed && track.last !== undefined) {
        const found = resolvePoint(entriesOf(ctx), await this.#list(name, ctx), tip);
        if (found?.checkpoint.id === track.last) return true;
      }
      const taken = await this.#call<{ checkpoint: CheckpointInfo }>(
        { action: "checkpoint", name, label: pointLabel(tip) },
        ctx,
      );
      track.last = taken.checkpoint.id;
      track.changed = false;
      return true;
    } catch (error) {
      tellUser(ctx, `Could not keep ${name} as it is before leaving this point:\n${describeError(error)}`, "warning");
      return false;
    }
  }

  /**
   * /tree: for each instance of the session with checkpoints of ours, keeps the state at the tip
   * being left (when something ran since its last checkpoint), and, when the point gone to has a
   * checkpoint the instance is not at already, asks whether to rewind it there too.
   */
  async beforeTree(event: SessionBeforeTreeEvent, ctx: ExtensionContext): Promise<SessionBeforeTreeResult | undefined> {
    if (!ctx.hasUI) return undefined;
    const target = ctx.sessionManager.getEntry(event.preparation.targetId);
    if (!target) return undefined;
    const point = leafAfterNavigation(target as unknown as TreeEntry);
    const tip = event.preparation.oldLeafId;
    if (point === tip) return undefined;
    for (const name of this.#instancesOfSession(ctx)) {
      let list: CheckpointInfo[];
      try {
        list = await this.#list(name, ctx);
      } catch {
        continue; // gone, or a controller without checkpoints: nothing to offer
      }
      if (!list.some((c) => labelEntry(c.label) !== undefined)) continue;
      const track = this.#track(name);
      const found = resolvePoint(entriesOf(ctx), list, point);
      const there = found !== undefined && !track.changed && track.last === found.checkpoint.id;
      const what = found ? describeLabel(entriesOf(ctx), found.checkpoint.label) : "";
      const choice =
        found && !there
          ? await ctx.ui.select(
              escapeControlChars(
                `Rewind the environment ${name} to this point too? (checkpoint ${found.checkpoint.id}, ${what})`,
              ),
              [...REWIND_CHOICES],
              { signal: event.signal },
            )
          : undefined;
      const tipKept = await this.#keepTip(name, tip, ctx);
      if (!found || choice !== REWIND_CHOICES[0]) continue;
      if (await this.#rewind(name, found.checkpoint, what, tipKept, ctx)) return { cancel: true };
    }
    return undefined;
  }

  /** Rewinds `name`; returns true when it failed (the user was told). */
  async #rewind(
    name: string,
    checkpoint: CheckpointInfo,
    what: string,
    tipKept: boolean,
    ctx: ExtensionContext,
  ): Promise<boolean> {
    const track = this.#track(name);
    tellUser(ctx, `Rewinding ${name} to checkpoint ${checkpoint.id} (${what})…`, "info");
    try {
      const result = await this.attachments.holding(name, () =>
        this.#call<{ before?: CheckpointInfo }>({ action: "rewind", name, checkpoint: checkpoint.id }, ctx),
      );
      track.last = checkpoint.id;
      track.changed = false;
      // The controller kept the state it left too; ours (labelled with the tip) holds the same.
      if (tipKept && result.before) {
        await this.#call({ action: "checkpoint-rm", name, checkpoint: result.before.id }, ctx).catch(() => undefined);
      }
      tellUser(ctx, `Rewound ${name} to checkpoint ${checkpoint.id} (${what}).`, "info");
      return false;
    } catch (error) {
      track.changed = true;
      tellUser(ctx, `${describeError(error)}\nThe conversation stays where it was.`, "error");
      return true;
    }
  }

  /**
   * The checkpoint holding `name` at `point` (a leaf id; null: before the first entry), for /fork:
   * undefined when the instance is there now (the leaf, or nothing ran since that checkpoint), null
   * when no checkpoint holds it or the list cannot be read.
   */
  async checkpointAt(
    name: string,
    point: string | null,
    ctx: ExtensionContext,
  ): Promise<{ id: string; what: string } | null | undefined> {
    if (point === ctx.sessionManager.getLeafId()) return undefined;
    let found;
    try {
      found = resolvePoint(entriesOf(ctx), await this.#list(name, ctx), point);
    } catch {
      return null;
    }
    if (!found) return null;
    const track = this.#track(name);
    if (!track.changed && track.last === found.checkpoint.id) return undefined;
    return { id: found.checkpoint.id, what: describeLabel(entriesOf(ctx), found.checkpoint.label) };
  }

  /** Calls a controller action for the user, as Pi's /sandbox does. */
  call<T>(action: Record<string, unknown>, ctx: ExtensionContext): Promise<T> {
    return this.#call(action, ctx);
  }

  /** `/sandbox checkpoints [name]`: the instance's checkpoints, each by the turn it belongs to. */
  async describe(name: string, ctx: ExtensionContext): Promise<string> {
    const listed = await this.#call<{ checkpoints?: CheckpointInfo[]; bytes?: number }>(
      { action: "checkpoints", name },
      ctx,
    );
    const list = listed.checkpoints ?? [];
    const entries = entriesOf(ctx);
    const lines = list.map((c) => {
      const time = new Date(c.createdAt).toLocaleTimeString();
      return `  ${c.id}  ${time}  ${c.kind}${c.pinned ? " pinned" : ""}  ${describeLabel(entries, c.label)}`;
    });
    const failure = this.#tracks.get(name)?.failure;
    const head =
      list.length === 0
        ? `${name} has no checkpoints.`
        : `Checkpoints of ${name}, oldest first (${((listed.bytes ?? 0) / 2 ** 20).toFixed(1)} MiB beyond its disk):`;
    return [head, ...lines, ...(failure ? [`The last checkpoint before a turn failed: ${failure}`] : [])].join("\n");
  }
}
