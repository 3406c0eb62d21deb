// `/sandbox`: for the user only, never shown to the model.
//   /sandbox                  pick a running instance, then get its terminal command
//   /sandbox <name> [user]    a temporary ssh command into the instance
//   /sandbox attach [name]    route Pi's built-in tools into the instance (pick list without a name)
//   /sandbox detach           return them to the host
//   /sandbox dashboard        start (or find) the local web dashboard and print a link to it
//   /sandbox checkpoints [name]  an instance's checkpoints, each by the turn it belongs to
//   /sandbox fork [name] [N]  copy an instance (the attached one) into N running forks (default 1)
//   /sandbox rewind <checkpoint> [name]  back to a kept checkpoint (its id or label)
//   /sandbox audit [name]     the last entries of an instance's ledger
//   /sandbox context [name]   which machine the calls go to; switch this session to another

import type { ExtensionCommandContext, RegisteredCommand } from "@earendil-works/pi-coding-agent";
import type { AutocompleteItem } from "@earendil-works/pi-tui";
import {
  escapeControlChars,
  ledgerEntryLine,
  type DashboardInfo,
  type EntryView,
  type LedgerEntry,
} from "@pi-sandbox/controller/client";
import { describeError, tellUser, type Attachments } from "./attach.js";
import type { EnvironmentBranches } from "./branching.js";
import { contextCommand, sessionContexts } from "./context-command.js";
import { SandboxExtensionError } from "./errors.js";
import type { SandboxDependencies } from "./tool.js";

/** The shell action's result. */
interface ShellAccess {
  command: string;
  user: string;
  port: number;
}

const USAGE =
  "Usage: /sandbox <name> [user] (terminal; user defaults to root), /sandbox attach [name], /sandbox detach, /sandbox dashboard, /sandbox checkpoints [name], /sandbox fork [name] [N], /sandbox rewind <checkpoint> [name], /sandbox audit [name], /sandbox context [name]. Without a name, pick from a list.";
const SUBCOMMANDS = ["attach", "detach"] as const;
/** Subcommands that take an instance name after them. */
const NAMED_SUBCOMMANDS = new Set(["attach", "checkpoints", "fork", "audit"]);
/** Entries `/sandbox audit` shows. */
const AUDIT_LAST = 20;

/** What the command needs besides the controller client. */
export interface SandboxCommandOptions {
  /** The session's attach state; without it attach and detach are unavailable. */
  attachments?: Attachments;
  /** The environment's checkpoints per turn; without it `checkpoints` is unavailable. */
  branches?: EnvironmentBranches;
  /** Called after the command changed something the footer shows. */
  onChange?: (ctx: ExtensionCommandContext) => void;
}

async function listInstances(deps: SandboxDependencies): Promise<EntryView[]> {
  const listed = (await deps.callAction({ action: "list" }, { env: deps.env })) as { instances?: EntryView[] };
  return listed.instances ?? [];
}

/** One pick-list line: name, state and first preview, escaped and short. */
function pickLabel(view: EntryView): string {
  const url = view.previews[0]?.url;
  const state = view.idle?.suspended ? `${view.state} (idle)` : view.state;
  return escapeControlChars(`${view.name} · ${state}${url ? ` · ${url}` : ""}`).slice(0, 120);
}

/** Offers the running instances (and those suspended while unused, which wake) in a pick list; undefined when cancelled or none runs. */
async function pickInstance(
  deps: SandboxDependencies,
  ctx: ExtensionCommandContext,
  title: string,
): Promise<string | undefined> {
  const running = (await listInstances(deps)).filter((v) => v.state === "running" || v.idle?.suspended);
  if (running.length === 0) {
    tellUser(
      ctx,
      'No instance is running. Start one with the sandbox tool ({"action":"start","name":…}) or pi-sandbox start.',
      "info",
    );
    return undefined;
  }
  const labels = running.map(pickLabel);
  const chosen = await ctx.ui.select(title, labels, { signal: ctx.signal });
  const index = chosen === undefined ? -1 : labels.indexOf(chosen);
  return index < 0 ? undefined : running[index]!.name;
}

async function dashboard(
  deps: SandboxDependencies,
  ctx: ExtensionCommandContext,
  options: SandboxCommandOptions,
): Promise<void> {
  const info = (await deps.callAction(
    { action: "dashboard" },
    { cwd: ctx.cwd, env: deps.env, signal: ctx.signal, caller: "user" },
  )) as DashboardInfo;
  options.onChange?.(ctx);
  tellUser(
    ctx,
    `${info.started ? "Dashboard started" : "Dashboard running"} on 127.0.0.1 (it keeps running after Pi exits; pi-sandbox dashboard --stop ends it). Open:\n${info.url}`,
    "info",
  );
}

/** A guest user name, as the shell action takes it. */
const GUEST_USER = /^[a-z_][a-z0-9_-]{0,31}$/;

/**
 * The terminal of another context's instance: the CLI's `shell --context`, which runs the session
 * there over the context's ssh (a key made there would be of no use here). The instance is looked
 * up there first, so a wrong name is said now rather than in the terminal.
 */
async function contextTerminal(
  deps: SandboxDependencies,
  ctx: ExtensionCommandContext,
  context: string,
  name: string,
  user?: string,
): Promise<void> {
  if (user !== undefined && !GUEST_USER.test(user)) {
    return usageError(ctx, `${escapeControlChars(user)} is not a guest user name`);
  }
  const view = (await deps.callAction(
    { action: "inspect", name },
    { cwd: ctx.cwd, env: deps.env, signal: ctx.signal, caller: "user" },
  )) as EntryView;
  const command = ["pi-sandbox", "shell", view.name, ...(user !== undefined ? [user] : []), "--context", context];
  tellUser(
    ctx,
    `Terminal for ${view.name} on ${context} as ${user ?? "root"} (runs there over the context's ssh; run it in a terminal here):\n${command.join(" ")}`,
    "info",
  );
}

async function terminal(deps: SandboxDependencies, ctx: ExtensionCommandContext, name: string, user?: string) {
  const { current } = await sessionContexts(deps);
  if (current !== "local") return contextTerminal(deps, ctx, current, name, user);
  const action: Record<string, unknown> = { action: "shell", name };
  if (user !== undefined) action.user = user;
  const access = (await deps.callAction(action, {
    cwd: ctx.cwd,
    env: deps.env,
    signal: ctx.signal,
    caller: "user",
  })) as ShellAccess;
  tellUser(
    ctx,
    `Terminal for ${name} as ${access.user} (fresh key; closes after 10 min unused or when the instance stops):\n${access.command}`,
    "info",
  );
}

function usageError(ctx: ExtensionCommandContext, message: string): void {
  const error = new SandboxExtensionError("PI_SANDBOX_COMMAND_USAGE", message, { hint: USAGE });
  tellUser(ctx, `${error.message}. ${USAGE}`, "error");
}

/**
 * `/sandbox fork [name] [N]`, `/sandbox rewind <checkpoint> [name]` and `/sandbox audit [name]`,
 * the attached instance when no name is given. The user typed them: they run as the user's calls.
 */
async function branchCommand(
  deps: SandboxDependencies,
  ctx: ExtensionCommandContext,
  words: readonly string[],
  attached: string | undefined,
): Promise<void> {
  const [sub, ...rest] = words;
  const call = (action: Record<string, unknown>) =>
    deps.callAction(action, { cwd: ctx.cwd, env: deps.env, signal: ctx.signal, caller: "user", via: "pi" });
  if (sub === "rewind") {
    const [checkpoint, name = attached] = rest;
    if (checkpoint === undefined || rest.length > 2 || name === undefined)
      return usageError(ctx, "/sandbox rewind takes a checkpoint (id or label) and, when Pi is not attached, a name");
    const view = (await call({ action: "rewind", name, checkpoint })) as EntryView & { before?: { id: string } };
    tellUser(
      ctx,
      escapeControlChars(
        `${name} is back at checkpoint ${checkpoint} and ${view.state}${view.before ? `; the state it left is checkpoint ${view.before.id}` : ""}.`,
      ),
      "info",
    );
    return;
  }
  const name = rest[0] ?? attached;
  if (name === undefined) return usageError(ctx, `/sandbox ${sub} needs an instance name when Pi is not attached`);
  if (sub === "audit") {
    if (rest.length > 1) return usageError(ctx, "/sandbox audit takes one instance name");
    const read = (await call({ action: "audit", name, last: AUDIT_LAST })) as { entries: LedgerEntry[] };
    const lines = read.entries.map(ledgerEntryLine);
    tellUser(
      ctx,
      lines.length > 0
        ? `The last ${lines.length} entries of ${name}'s ledger:\n${lines.join("\n")}`
        : `${name}'s ledger is empty.`,
      "info",
    );
    return;
  }
  const count = rest[1] === undefined ? 1 : Number(rest[1]);
  if (rest.length > 2 || !Number.isInteger(count) || count < 1 || count > 16)
    return usageError(ctx, "/sandbox fork takes a name and a number of forks from 1 to 16");
  const forked = (await call({ action: "fork", name, count })) as {
    forks: { name: string }[];
    pauseMs?: number;
    started?: EntryView[];
  };
  const lines = forked.forks.map((f) => {
    const view = forked.started?.find((v) => v.name === f.name);
    return `${f.name}: ${view?.state ?? "not started"}${view?.previews[0] ? ` ${view.previews[0].url}` : ""}`;
  });
  tellUser(
    ctx,
    escapeControlChars(
      `Forked ${name}${forked.pauseMs !== undefined ? ` (paused ${(forked.pauseMs / 1000).toFixed(1)} s)` : ""}:`,
    ) + `\n${lines.map((l) => escapeControlChars(l)).join("\n")}`,
    "info",
  );
}

/** Builds the `/sandbox` command around injected dependencies. */
export function createSandboxCommand(
  deps: SandboxDependencies,
  options: SandboxCommandOptions = {},
): Omit<RegisteredCommand, "name" | "sourceInfo"> {
  const { attachments } = options;
  return {
    description:
      "Sandbox terminal, attach, detach, dashboard and checkpoints: /sandbox [name [user]] | attach [name] | detach | dashboard | checkpoints [name]",
    async getArgumentCompletions(prefix) {
      const words = prefix.split(/\s+/);
      if (words.length > 2 || (words.length === 2 && !NAMED_SUBCOMMANDS.has(words[0]!))) return null;
      const word = words.at(-1) ?? "";
      const lead = words.length === 2 ? `${words[0]} ` : "";
      const items: AutocompleteItem[] = [];
      if (words.length === 1 && attachments) {
        for (const sub of [
          ...SUBCOMMANDS,
          "dashboard",
          "fork",
          "rewind",
          "audit",
          "context",
          ...(options.branches ? ["checkpoints"] : []),
        ])
          if (sub.startsWith(word)) items.push({ value: `${sub} `, label: sub });
      }
      try {
        for (const i of await listInstances(deps)) {
          if (i.name.startsWith(word)) items.push({ value: `${lead}${i.name}`, label: i.name, description: i.state });
        }
      } catch {
        // no completions from a state root that cannot be read
      }
      return items.length > 0 ? items : null;
    },
    async handler(args, ctx) {
      const words = args.trim().split(/\s+/).filter(Boolean);
      try {
        if (words[0] === "dashboard" && words.length === 1) return await dashboard(deps, ctx, options);
        if (words[0] === "context" && words.length <= 2) return await contextCommand(deps, ctx, words[1]);
        if (options.branches && words[0] === "checkpoints") {
          if (words.length > 2) return usageError(ctx, "/sandbox checkpoints takes one instance name");
          const name = words[1] ?? attachments?.name;
          if (name === undefined)
            return usageError(ctx, "/sandbox checkpoints needs an instance name when Pi is not attached");
          tellUser(ctx, await options.branches.describe(name, ctx), "info");
          return;
        }
        if (words[0] === "fork" || words[0] === "rewind" || words[0] === "audit") {
          return await branchCommand(deps, ctx, words, attachments?.name);
        }
        if (attachments && words[0] === "detach") {
          if (words.length > 1) return usageError(ctx, "/sandbox detach takes no argument");
          if (!attachments.detach(ctx)) tellUser(ctx, "Pi is not attached to a sandbox instance.", "info");
          return;
        }
        if (attachments && words[0] === "attach") {
          if (words.length > 2) return usageError(ctx, "/sandbox attach takes one instance name");
          let name = words[1];
          if (name === undefined) {
            if (!ctx.hasUI)
              return usageError(ctx, "/sandbox attach needs an instance name here (no pick list without a UI)");
            name = await pickInstance(deps, ctx, "Attach Pi's tools to which instance?");
            if (name === undefined) return;
          }
          if (attachments.name === name) {
            tellUser(ctx, `Pi is already attached to ${name}.`, "info");
            return;
          }
          await attachments.attach(name, ctx);
          return;
        }
        if (words.length > 2) return usageError(ctx, "/sandbox takes an instance name and an optional user");
        const user = words[1];
        let name = words[0];
        if (name === undefined) {
          if (!ctx.hasUI) return usageError(ctx, "/sandbox needs an instance name");
          name = await pickInstance(deps, ctx, "Open a terminal into which instance?");
          if (name === undefined) return;
        }
        await terminal(deps, ctx, name, user);
      } catch (error) {
        tellUser(ctx, describeError(error), "error");
      } finally {
        options.onChange?.(ctx);
      }
    },
  };
}
