// `/sandbox`: for the user only, never shown to the model.
//   /sandbox                  pick a running instance, then get its terminal command
//   /sandbox <name> [user]    a temporary ssh command into the instance
//   /sandbox attach [name]    route Pi's built-in tools into the instance (pick list without a name)
//   /sandbox detach           return them to the host
//   /sandbox dashboard        start (or find) the local web dashboard and print a link to it
//   /sandbox checkpoints [name]  an instance's checkpoints, each by the turn it belongs to

import type { ExtensionCommandContext, RegisteredCommand } from "@earendil-works/pi-coding-agent";
import type { AutocompleteItem } from "@earendil-works/pi-tui";
import { escapeControlChars, type DashboardInfo, type EntryView } from "@pi-sandbox/controller/client";
import { describeError, tellUser, type Attachments } from "./attach.js";
import type { EnvironmentBranches } from "./branching.js";
import { SandboxExtensionError } from "./errors.js";
import type { SandboxDependencies } from "./tool.js";

/** The shell action's result. */
interface ShellAccess {
  command: string;
  user: string;
  port: number;
}

const USAGE =
  "Usage: /sandbox <name> [user] (terminal; user defaults to root), /sandbox attach [name], /sandbox detach, /sandbox dashboard, /sandbox checkpoints [name]. Without a name, pick from a list.";
const SUBCOMMANDS = ["attach", "detach"] as const;
/** Subcommands that take an instance name after them. */
const NAMED_SUBCOMMANDS = new Set(["attach", "checkpoints"]);

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

async function terminal(deps: SandboxDependencies, ctx: ExtensionCommandContext, name: string, user?: string) {
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
        for (const sub of [...SUBCOMMANDS, "dashboard", ...(options.branches ? ["checkpoints"] : [])])
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
        if (options.branches && words[0] === "checkpoints") {
          if (words.length > 2) return usageError(ctx, "/sandbox checkpoints takes one instance name");
          const name = words[1] ?? attachments?.name;
          if (name === undefined)
            return usageError(ctx, "/sandbox checkpoints needs an instance name when Pi is not attached");
          tellUser(ctx, await options.branches.describe(name, ctx), "info");
          return;
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
