// The extension factory. Loading registers a tool, a command and event handlers and nothing else:
// no daemon, socket, timer or VM starts here. A session with a UI refreshes the footer on a timer
// that session_start starts and session_shutdown stops; environments outlive Pi either way. The
// environment follows the conversation (branching.ts): checkpoints before turns that change it,
// a rewind offered on /tree, a fork offered on /fork and /clone. The instances a session uses ask
// its user before their guests reach a host off allowedHosts (egress-prompts.ts).

import type { ExtensionAPI, ExtensionFactory } from "@earendil-works/pi-coding-agent";
import { Attachments } from "./attach.js";
import { EnvironmentBranches } from "./branching.js";
import { createSandboxCommand } from "./command.js";
import { EgressPrompts } from "./egress-prompts.js";
import { SandboxStatus } from "./status.js";
import { createSandboxTool, type SandboxDependencies } from "./tool.js";

/** Returns a Pi extension factory wired to the given controller client. */
export function createSandboxExtension(deps: SandboxDependencies): ExtensionFactory {
  return (pi: ExtensionAPI) => {
    const attachments = new Attachments(pi, deps);
    const status = new SandboxStatus(deps, attachments);
    const branches = new EnvironmentBranches(pi, deps, attachments);
    const egress = new EgressPrompts(deps, () => attachments.name);
    attachments.onChange = (ctx) => {
      status.showAttach(ctx);
      void status.refresh(ctx);
    };
    pi.registerTool(
      createSandboxTool({
        ...deps,
        afterCall: (ctx) => void status.refresh(ctx),
        beforeCall: (name) => egress.use(name),
        isAttached: () => attachments.name !== undefined,
      }),
    );
    pi.registerCommand(
      "sandbox",
      createSandboxCommand(deps, {
        attachments,
        branches,
        onChange: (ctx) => void status.refresh(ctx),
      }),
    );

    pi.on("session_start", async (event, ctx) => {
      status.start(ctx);
      egress.start(ctx);
      if (!(await branches.sessionStarted(event, ctx))) await attachments.restore(ctx);
    });
    pi.on("session_shutdown", () => {
      status.stop();
      egress.stop();
    });
    pi.on("user_bash", () => {
      const operations = attachments.userBashOperations();
      if (operations) branches.userBash();
      return operations ? { operations } : undefined;
    });
    pi.on("agent_start", (_event, ctx) => branches.runStarted(ctx));
    pi.on("agent_end", () => branches.runEnded());
    pi.on("tool_call", async (event, ctx) => {
      await branches.beforeToolCall(event, ctx);
      return undefined;
    });
    pi.on("session_before_tree", (event, ctx) => branches.beforeTree(event, ctx));
    pi.on("session_before_fork", (event, ctx) => branches.beforeFork(event, ctx));
    pi.on("before_agent_start", (event) => {
      attachments.promptSection(event.systemPromptOptions);
    });
  };
}
