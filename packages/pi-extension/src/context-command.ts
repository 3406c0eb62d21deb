// `/sandbox context [name]`: which machine this Pi session's sandbox calls go to (the contexts the
// pi-sandbox CLI keeps: `pi-sandbox context add`), and a switch for this session. Without a
// switch the session follows PI_SANDBOX_CONTEXT, else `pi-sandbox context use`, else this machine.

import type { ExtensionCommandContext } from "@earendil-works/pi-coding-agent";
import { escapeControlChars } from "@pi-sandbox/controller/client";
import { tellUser } from "./attach.js";
import type { SandboxDependencies } from "./tool.js";

/** What `context-ls` answers. */
interface ContextList {
  current: string;
  contexts: { name: string; url: string }[];
}

/** The context this session's calls go to, and every context. */
export async function sessionContexts(deps: SandboxDependencies): Promise<ContextList> {
  const listed = (await deps.callAction({ action: "context-ls" }, { env: deps.env })) as ContextList;
  const chosen = (deps.env ?? process.env).PI_SANDBOX_CONTEXT;
  return { ...listed, current: chosen || listed.current };
}

/** The footer's `context: <name>` when the calls go to another machine, else undefined. */
export async function contextStatus(deps: SandboxDependencies): Promise<string | undefined> {
  const { current, contexts } = await sessionContexts(deps);
  if (current === "local") return undefined;
  const url = contexts.find((c) => c.name === current)?.url;
  return escapeControlChars(`context: ${current}${url ? ` (${url})` : ""}`);
}

/** `/sandbox context` lists; `/sandbox context <name>` sends this session's calls there. */
export async function contextCommand(
  deps: SandboxDependencies,
  ctx: ExtensionCommandContext,
  name: string | undefined,
): Promise<void> {
  const { current, contexts } = await sessionContexts(deps);
  if (name === undefined) {
    const lines = contexts.map((c) => `${c.name === current ? "* " : "  "}${c.name}  ${c.url || "(this machine)"}`);
    tellUser(
      ctx,
      `Sandbox calls go to ${current}. Contexts:\n${lines.join("\n")}\nSwitch: /sandbox context <name>`,
      "info",
    );
    return;
  }
  if (!contexts.some((c) => c.name === name)) {
    tellUser(
      ctx,
      `There is no context ${name}; add one with: pi-sandbox context add ${name} ssh://[user@]host`,
      "error",
    );
    return;
  }
  // This process's calls (the tool's, the footer's, /sandbox's) read it from the environment.
  (deps.env ?? process.env).PI_SANDBOX_CONTEXT = name;
  tellUser(ctx, `Sandbox calls of this session go to ${name} now.`, "info");
}
