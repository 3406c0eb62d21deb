// The `sandbox` tool: one string parameter holding a JSON action, answered by the controller client.

import type { ExtensionContext, ToolDefinition } from "@earendil-works/pi-coding-agent";
import { ACTIONS, type CallActionOptions, type ProgressEvent } from "@pi-sandbox/controller/client";
import { Type } from "typebox";
import {
  detachedResult,
  errorResult,
  progressResult,
  successResult,
  type SandboxToolDetails,
  type SandboxToolResult,
} from "./format.js";
import { peekAction, prepareSandboxArguments } from "./input.js";
import { renderSandboxCall, renderSandboxResult } from "./render.js";

/** Runs one controller action; `callAction` from `@pi-sandbox/controller/client` in production. */
export type CallActionFn = (input: unknown, options: CallActionOptions) => Promise<unknown>;

/** What the tool and the command need from the outside world. */
export interface SandboxDependencies {
  /** The controller client's `callAction`, or a fake in tests. */
  callAction: CallActionFn;
  /** Environment for state-root resolution; `undefined` lets the client read `process.env` per call. */
  env?: NodeJS.ProcessEnv;
  /** Called after each tool call, whatever its outcome (the extension refreshes the footer). */
  afterCall?: (ctx: ExtensionContext) => void;
  /** Awaited before each tool call that names an instance (the extension watches its egress asks). */
  beforeCall?: (name: string) => Promise<void>;
  /** True while Pi's tools are attached to an instance: every host path then needs the user's yes. */
  isAttached?: () => boolean;
}

/**
 * The user's yes or no through Pi's own dialog, which the model cannot answer; none where Pi has
 * no UI (print and JSON modes), so the controller refuses what needs it.
 */
export function userConfirm(ctx: ExtensionContext): CallActionOptions["confirm"] {
  if (!ctx.hasUI) return undefined;
  return ({ title, message }) => ctx.ui.confirm(title, message);
}

/** Progress events remembered per call (only the last few reach `details`). */
const PROGRESS_MEMORY = 50;

const parameters = Type.Object({
  input: Type.String({
    description: 'One JSON action as a string, e.g. {"action":"list"}. {} returns help.',
  }),
});

/** Loose schema of a successful result: code-mode scripts receive the action's JSON object. */
const outputSchema = Type.Object(
  {},
  { additionalProperties: true, description: "The action's JSON result; help comes as {help: string}." },
);

function description(): string {
  const names = ACTIONS.filter((a) => !a.userOnly).map((a) => a.name);
  return [
    "Named local development environments: QEMU microVMs with a persistent disk, supervised services and localhost preview URLs.",
    'The single parameter `input` is one JSON action as text, for example {"action":"create","name":"demo","config":"sandbox.yaml"}.',
    "Send {} (or help) first: it returns every action with its arguments, the sandbox.yaml keys with defaults, profiles and limits.",
    `Actions: ${names.join(", ")}.`,
    "Results are compact JSON; errors carry a hint on what to do next. The interactive terminal is for the user (/sandbox <name>).",
  ].join("\n");
}

/** Ends the wait when the signal fires; the work itself is not cancelled. */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return work;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    if (signal.aborted) {
      onAbort();
      return;
    }
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** Builds the `sandbox` tool definition around injected dependencies. */
export function createSandboxTool(deps: SandboxDependencies): ToolDefinition<typeof parameters, SandboxToolDetails> {
  return {
    name: "sandbox",
    label: "Sandbox",
    description: description(),
    promptSnippet:
      "Create, drive and inspect local VM dev environments with preview URLs (input: JSON action; {} = help)",
    promptGuidelines: [
      "Use sandbox with input {} to read its actions and arguments before the first other sandbox call.",
      "When a sandbox call is interrupted, the work continues in the background: check it with sandbox inspect before repeating it.",
      "The sandbox terminal (ssh) is for the user only: tell the user to type /sandbox <name> instead of requesting it.",
    ],
    parameters,
    outputSchema,
    prepareArguments: prepareSandboxArguments,
    async execute(_toolCallId, params, signal, onUpdate, ctx): Promise<SandboxToolResult> {
      const peek = peekAction(params.input);
      const events: ProgressEvent[] = [];
      if (signal?.aborted) return detachedResult(peek, events);
      const onProgress = (event: ProgressEvent) => {
        events.push(event);
        if (events.length > PROGRESS_MEMORY) events.shift();
        if (!signal?.aborted) onUpdate?.(progressResult(peek, events));
      };
      try {
        if (peek.name !== undefined && peek.kind !== "templates") await deps.beforeCall?.(peek.name);
        const work = deps.callAction(params.input, {
          cwd: ctx.cwd,
          env: deps.env,
          signal,
          onProgress,
          caller: "model",
          confirm: userConfirm(ctx),
          attached: deps.isAttached?.() === true,
        });
        return successResult(peek, await untilAborted(work, signal));
      } catch (error) {
        // Only the wait ended: the daemon keeps going with what it was sent.
        if (signal?.aborted) return detachedResult(peek, events);
        return errorResult(peek, error);
      } finally {
        deps.afterCall?.(ctx);
      }
    },
    renderCall: (args, theme) => renderSandboxCall(args, theme),
    renderResult: (result, options, theme) => renderSandboxResult(result, options, theme),
  };
}
