// `/sandbox attach <name>` and `/sandbox detach`: Pi's built-in tools act inside one instance.
// Only the user attaches (commands; no tool does it). The overrides are registered at the first
// attach, never at load, and while nothing is attached they are Pi's own host tools. The attach
// is kept as a session entry, so it survives /reload and a resumed session.

import type {
  BashOperations,
  ExtensionAPI,
  ExtensionContext,
  ToolRenderResultOptions,
  Theme,
} from "@earendil-works/pi-coding-agent";
import { Container, Text } from "@earendil-works/pi-tui";
import { escapeControlChars, isControllerError } from "@pi-sandbox/controller/client";
import { SandboxExtensionError } from "./errors.js";
import { errorJson } from "./format.js";
import { GuestInstance } from "./guest.js";
import {
  ROUTED_TOOLS,
  guestToolDefinition,
  hostToolDefinition,
  type AnyToolDefinition,
  type HostToolSettings,
  type RoutedToolName,
} from "./guest-tools.js";
import type { SandboxDependencies } from "./tool.js";

/** Session entry recording the attach (`{ name }`) or the detach (`{ name: null }`). */
export const ATTACH_ENTRY = "pi-sandbox-attach";
/** Custom message type telling the model where its tools run. */
export const ATTACH_MESSAGE = "pi-sandbox";
/** Footer status key of the attach (sorts before the instance list's). */
export const ATTACH_STATUS = "pi-sandbox.attach";
/** System prompt section present while attached. */
const PROMPT_SECTION = "sandbox_attached";

/** Controller errors that mean the instance is no longer there to work in. */
const GONE = new Set([
  "CONTROLLER_NOT_RUNNING",
  "CONTROLLER_NOT_FOUND",
  "CONTROLLER_DAEMON_LOST",
  "CONTROLLER_DAEMON_EXITING",
]);

/** True when an error says the attached instance stopped or is gone. */
export function isInstanceGone(error: unknown): boolean {
  return isControllerError(error) && GONE.has(error.code);
}

/** Sends text to the user only: a UI notification, or stderr where Pi has no UI (print mode). */
export function tellUser(ctx: ExtensionContext, message: string, level: "info" | "warning" | "error"): void {
  const shown = escapeControlChars(message, { multiline: true });
  if (ctx.hasUI) ctx.ui.notify(shown, level);
  else process.stderr.write(`${shown}\n`);
}

/** `CODE: message` and the hint, escaped, for errors that reach the model or the user. */
export function describeError(error: unknown): string {
  const json = errorJson(error);
  return `${json.code}: ${json.message}${json.hint ? `\nHint: ${json.hint}` : ""}`;
}

const toolList = ROUTED_TOOLS.join(", ");

/** The result renderer of a routed tool: Pi's own, plus a line naming the instance it ran in. */
function withInstanceLine(definition: AnyToolDefinition): AnyToolDefinition["renderResult"] {
  const inner = definition.renderResult;
  if (!inner) return undefined;
  return (result, options: ToolRenderResultOptions, theme: Theme, context) => {
    const rendered = inner(result, options, theme, context);
    const where = (result.details as { sandbox?: unknown } | undefined)?.sandbox;
    if (typeof where !== "string") return rendered;
    const box = new Container();
    box.addChild(rendered);
    box.addChild(new Text(theme.fg("dim", `in sandbox ${escapeControlChars(where)}`), 0, 0));
    return box;
  };
}

/** The attach state of one Pi session. */
export class Attachments {
  #guest: GuestInstance | undefined;
  #registered = false;
  /** Instances the extension itself is rewinding or forking, and when each was last let go. */
  #held = new Set<string>();
  #released = new Map<string, number>();
  /** Called after every attach and detach (the footer refreshes). */
  onChange: (ctx: ExtensionContext) => void = () => undefined;

  constructor(
    private readonly pi: ExtensionAPI,
    private readonly deps: SandboxDependencies,
  ) {}

  /** The attached instance's name. */
  get name(): string | undefined {
    return this.#guest?.name;
  }

  /**
   * Runs `work` (a rewind or fork of `name`) while the footer's look must not take the states it
   * passes through (stopped, suspended) for the instance going away.
   */
  async holding<T>(name: string, work: () => Promise<T>): Promise<T> {
    this.#held.add(name);
    try {
      return await work();
    } finally {
      this.#held.delete(name);
      this.#released.set(name, Date.now());
    }
  }

  /** Whether `name` was held at any time since `since` (ms): a look begun then may have seen it mid-change. */
  heldSince(name: string, since: number): boolean {
    return this.#held.has(name) || (this.#released.get(name) ?? -Infinity) >= since;
  }

  /** Registers the seven overrides once, keeping the active tool set as the user had it. */
  #register(): void {
    if (this.#registered) return;
    this.#registered = true;
    const active = this.pi.getActiveTools();
    for (const name of ROUTED_TOOLS) this.pi.registerTool(this.#routed(name));
    this.pi.setActiveTools(active);
  }

  #routed(name: RoutedToolName): AnyToolDefinition {
    const settings = () => this.pi.getSettings() as HostToolSettings;
    const template = hostToolDefinition(name, process.cwd(), settings());
    return {
      ...template,
      execute: async (toolCallId, params, signal, onUpdate, ctx) => {
        const guest = this.#guest;
        if (!guest)
          return hostToolDefinition(name, ctx.cwd, settings()).execute(toolCallId, params, signal, onUpdate, ctx);
        const definition = guestToolDefinition(name, guest);
        // Pi's tools resolve paths against ctx.cwd: in the guest that is the workspace.
        const guestCtx = new Proxy(ctx, {
          get: (target, key) => (key === "cwd" ? guest.facts.workspace : Reflect.get(target, key, target)),
        });
        try {
          const result = await definition.execute(toolCallId, params, signal, onUpdate, guestCtx);
          return { ...result, details: { ...(result.details ?? {}), sandbox: guest.name } };
        } catch (error) {
          if (isInstanceGone(error) && this.#guest === guest) {
            const why = describeError(error);
            this.detach(ctx, `${guest.name} is no longer running (${why.split("\n")[0]})`);
            throw new Error(
              `${why}\nPi detached from ${guest.name}: ${toolList} act on the host again. Nothing of this call ran.`,
            );
          }
          if (isControllerError(error)) throw new Error(escapeControlChars(describeError(error), { multiline: true }));
          throw error instanceof Error ? new Error(escapeControlChars(error.message, { multiline: true })) : error;
        }
      },
      renderResult: withInstanceLine(template),
    };
  }

  /**
   * Attaches to a running instance: probes it (a stopped or missing one fails with the
   * controller's error and hint), routes the tools, records the attach and tells the model.
   */
  async attach(
    name: string,
    ctx: ExtensionContext,
    options: { restoring?: boolean; note?: string } = {},
  ): Promise<void> {
    const guest = new GuestInstance(name, this.deps.callAction, this.deps.env);
    try {
      await guest.probe(ctx.signal);
    } catch (error) {
      if (isControllerError(error)) throw error;
      throw new SandboxExtensionError(
        "PI_SANDBOX_ATTACH_FAILED",
        `cannot attach to ${name}: ${errorJson(error).message}`,
        {
          hint: `Check the instance with {"action":"inspect","name":"${name}"} and try /sandbox attach ${name} again.`,
          cause: error,
        },
      );
    }
    const previous = this.#guest;
    this.#guest = guest;
    this.#register();
    const workspace = guest.facts.workspace;
    // A restored attach is already in the session (entry and message); only the user is told again.
    if (!options.restoring) {
      this.pi.appendEntry(ATTACH_ENTRY, { name });
      this.pi.sendMessage(
        {
          customType: ATTACH_MESSAGE,
          content:
            `The user attached Pi to the sandbox instance ${name}${previous ? ` (was ${previous.name})` : ""}${options.note ? ` (${options.note})` : ""}: ${toolList} now run inside it, ` +
            `in its working directory ${workspace}. They do not reach the host's files until the user detaches. ` +
            `The sandbox tool's host paths (upload, download, a config for create or prepare) still name host files: ` +
            `while attached, each such call runs only after the user allows it in a prompt.`,
          display: true,
        },
        { deliverAs: "steer" },
      );
    }
    tellUser(
      ctx,
      `Attached to ${name}${options.note ? ` (${options.note})` : ""}: ${toolList} run in the instance (cwd ${workspace}). /sandbox detach returns them to the host.`,
      "info",
    );
    this.onChange(ctx);
  }

  /** Returns the tools to the host; `reason` says why when the user did not ask for it. */
  detach(ctx: ExtensionContext, reason?: string): boolean {
    const guest = this.#guest;
    if (!guest) return false;
    this.#guest = undefined;
    this.pi.appendEntry(ATTACH_ENTRY, { name: null });
    const why = reason ? `${reason}. ` : "";
    this.pi.sendMessage(
      {
        customType: ATTACH_MESSAGE,
        content: `${why}Pi is detached from the sandbox instance ${guest.name}: ${toolList} act on the host again, in ${ctx.cwd}.`,
        display: true,
      },
      { deliverAs: "steer" },
    );
    tellUser(ctx, `${why}Detached from ${guest.name}: ${toolList} act on the host again.`, reason ? "warning" : "info");
    this.onChange(ctx);
    return true;
  }

  /** After /reload or on a resumed session: re-attaches what the branch last attached, if it still runs. */
  async restore(ctx: ExtensionContext): Promise<void> {
    let name: string | null = null;
    for (const entry of ctx.sessionManager.getBranch()) {
      if (entry.type === "custom" && entry.customType === ATTACH_ENTRY) {
        const data = entry.data as { name?: unknown } | undefined;
        name = typeof data?.name === "string" ? data.name : null;
      }
    }
    if (name === null || name === this.name) return;
    try {
      await this.attach(name, ctx, { restoring: true });
    } catch (error) {
      this.pi.appendEntry(ATTACH_ENTRY, { name: null });
      const why = describeError(error);
      this.pi.sendMessage(
        {
          customType: ATTACH_MESSAGE,
          content: `This session was attached to the sandbox instance ${name}, which is not available now (${why.split("\n")[0]}). ${toolList} act on the host.`,
          display: true,
        },
        { deliverAs: "steer" },
      );
      tellUser(ctx, `Could not re-attach to ${name}; the tools stay on the host.\n${why}`, "warning");
      this.onChange(ctx);
    }
  }

  /**
   * The user's own `!command` while attached runs in the guest workspace too; undefined leaves
   * it to Pi (the host). The host's environment is not passed, as for the tool.
   */
  userBashOperations(): BashOperations | undefined {
    const guest = this.#guest;
    if (!guest) return undefined;
    return {
      exec: (command, _hostCwd, { onData, signal, timeout }) =>
        guest.stream(command, guest.facts.workspace, { onData, signal, timeoutSeconds: timeout }),
    };
  }

  /** Tells the model, in its system prompt, where the tools run while attached. */
  promptSection(options: { sections: Record<string, string>; cwd: string }): void {
    const { sections } = options;
    const guest = this.#guest;
    if (!guest) {
      delete sections[PROMPT_SECTION];
      return;
    }
    options.cwd = guest.facts.workspace;
    sections[PROMPT_SECTION] =
      `Pi is attached to the sandbox instance ${guest.name}. The ${toolList} tools run inside it; ` +
      `their working directory is ${guest.facts.workspace} in the instance, not the host directory named elsewhere in this prompt. ` +
      `The sandbox tool's host paths (upload, download, config) run only after the user allows each call. ` +
      `Only the user can attach or detach (/sandbox attach, /sandbox detach).`;
  }
}
