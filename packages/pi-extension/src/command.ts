// `/sandbox <name> [user]`: a temporary ssh command for the user, never shown to the model.

import type { ExtensionCommandContext, RegisteredCommand } from "@earendil-works/pi-coding-agent";
import { escapeControlChars } from "@pi-sandbox/controller/client";
import { SandboxExtensionError } from "./errors.js";
import { errorJson } from "./format.js";
import type { SandboxDependencies } from "./tool.js";

/** The shell action's result. */
interface ShellAccess {
  command: string;
  user: string;
  port: number;
}

const USAGE = "Usage: /sandbox <name> [user]; user defaults to root.";

/**
 * Sends text to the user only: a UI notification, or stderr where Pi has no UI (print mode).
 * Control characters are escaped (line breaks and tabs kept): error messages may carry guest text.
 */
function tellUser(ctx: ExtensionCommandContext, message: string, level: "info" | "error"): void {
  const shown = escapeControlChars(message, { multiline: true });
  if (ctx.hasUI) ctx.ui.notify(shown, level);
  else process.stderr.write(`${shown}\n`);
}

/** Builds the `/sandbox` command around injected dependencies. */
export function createSandboxCommand(deps: SandboxDependencies): Omit<RegisteredCommand, "name" | "sourceInfo"> {
  return {
    description: "Print a temporary ssh command into a sandbox instance: /sandbox <name> [user]",
    async getArgumentCompletions(prefix) {
      if (/\s/.test(prefix)) return null;
      try {
        const listed = (await deps.callAction({ action: "list" }, { env: deps.env })) as {
          instances?: { name: string; state: string }[];
        };
        const items = (listed.instances ?? [])
          .filter((i) => i.name.startsWith(prefix))
          .map((i) => ({ value: i.name, label: i.name, description: i.state }));
        return items.length > 0 ? items : null;
      } catch {
        return null;
      }
    },
    async handler(args, ctx) {
      const [name, user, ...rest] = args.trim().split(/\s+/).filter(Boolean);
      if (name === undefined || rest.length > 0) {
        const error = new SandboxExtensionError("PI_SANDBOX_COMMAND_USAGE", "/sandbox needs an instance name", {
          hint: USAGE,
        });
        tellUser(ctx, `${error.message}. ${USAGE}`, "error");
        return;
      }
      try {
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
          `Terminal for ${name} as ${access.user} (fresh key; closed when the instance stops):\n${access.command}`,
          "info",
        );
      } catch (error) {
        const json = errorJson(error);
        tellUser(ctx, `${json.code}: ${json.message}${json.hint ? `\n${json.hint}` : ""}`, "error");
      }
    },
  };
}
