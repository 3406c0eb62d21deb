// The other contexts' instances (machines reached over ssh): `list` through each context, all at
// once and each within a time limit, apart from the local poll, which never waits for ssh. A context
// that cannot be reached, or does not answer in time, is a row saying so. Polled only while a page
// listens (snapshot.ts), so an idle dashboard holds no ssh connection. With the list, the page's
// presence is said there (`egress-watch`): the running instances' guests then hold a request for
// a new host for the page's answer, as this machine's do, and what waits comes back with the list.
// What comes back is escaped like the rest of the snapshot; the previews it names are forwarded
// here by the call.
import { ControllerError } from "../errors.js";
import type { EgressAsk } from "../state/egress.js";
import type { EntryView } from "../state/inspect.js";
import type { CallFn, CallInFn } from "./call.js";
import { errorJson, escapeDeep, type ContextInstances } from "./snapshot.js";

/** How long a context may take to answer `list`, in ms. */
export const CONTEXT_TIMEOUT_MS = 8_000;

/** Options of {@link ContextPoller}. */
export interface ContextPollerOptions {
  /** How long a context may take to answer, in ms. */
  timeoutMs?: number | undefined;
  /** This dashboard's id, as an egress answerer there; without it no egress ask is held for the page. */
  answererId?: string | undefined;
}

/** What one context's poll brings: its list, and what its running instances' guests wait for. */
interface Listed {
  instances?: EntryView[];
  egress?: Record<string, EgressAsk[]>;
}

/** Lists the instances of every context but `local`; one poll at a time, one call per context at a time. */
export class ContextPoller {
  readonly #call: CallFn;
  readonly #callIn: CallInFn;
  readonly #timeoutMs: number;
  readonly #answererId: string | undefined;
  /** A context's `list` still under way (a slow one is not asked again until it answers). */
  readonly #pending = new Map<string, Promise<unknown>>();
  #inFlight: Promise<ContextInstances[]> | undefined;

  constructor(call: CallFn, callIn: CallInFn, options: ContextPollerOptions = {}) {
    this.#call = call;
    this.#callIn = callIn;
    this.#timeoutMs = options.timeoutMs ?? CONTEXT_TIMEOUT_MS;
    this.#answererId = options.answererId;
  }

  /** Polls every context (joining a poll under way); undefined when the contexts could not be read. */
  poll(): Promise<ContextInstances[] | undefined> {
    this.#inFlight ??= this.#poll().finally(() => (this.#inFlight = undefined));
    return this.#inFlight.catch(() => undefined);
  }

  async #poll(): Promise<ContextInstances[]> {
    const { contexts } = (await this.#call({ action: "context-ls" })) as { contexts: { name: string; url: string }[] };
    const others = contexts.filter((context) => context.name !== "local");
    return escapeDeep(await Promise.all(others.map((context) => this.#list(context))));
  }

  async #list(context: { name: string; url: string }): Promise<ContextInstances> {
    const { name, url } = context;
    let pending = this.#pending.get(name);
    if (!pending) {
      pending = this.#listAndWatch(name).finally(() => this.#pending.delete(name));
      this.#pending.set(name, pending);
    }
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const seconds = this.#timeoutMs / 1000;
        reject(
          new ControllerError("CONTROLLER_CONTEXT_UNREACHABLE", `context ${name} did not answer within ${seconds} s`, {
            hint: `Check the machine and its ssh: pi-sandbox ls --context ${name}`,
            details: { context: name },
          }),
        );
      }, this.#timeoutMs);
    });
    try {
      const listed = (await Promise.race([pending, late])) as Listed;
      const instances = (listed.instances ?? []).map((view) => ({ ...view, context: name }));
      return { context: name, url, instances, ...(listed.egress ? { egress: listed.egress } : {}) };
    } catch (error) {
      return { context: name, url, instances: [], error: errorJson(error) };
    } finally {
      clearTimeout(timer);
    }
  }

  /** `list` there, then (for running instances) the page's presence said there and what waits. */
  async #listAndWatch(context: string): Promise<Listed> {
    const listed = (await this.#callIn(context, { action: "list" })) as Listed;
    const running = (listed.instances ?? []).filter((v) => v.state === "running").map((v) => v.name);
    if (this.#answererId === undefined || running.length === 0) return listed;
    const watched = (await this.#callIn(context, {
      action: "egress-watch",
      names: running,
      id: this.#answererId,
    }).catch(() => undefined)) as { waiting?: Record<string, EgressAsk[]> } | undefined;
    const waiting = watched?.waiting ?? {};
    return Object.keys(waiting).length > 0 ? { ...listed, egress: waiting } : listed;
  }
}

/**
 * The context a page request names, checked against the contexts the page was shown: undefined
 * (or `local`) for this machine; another name is refused, so a request reaches only a machine the
 * user added and sees listed.
 */
export function pageContext(value: unknown, shown: readonly ContextInstances[]): string | undefined {
  if (value === undefined || value === null || value === "" || value === "local") return undefined;
  if (typeof value === "string" && shown.some((c) => c.context === value)) return value;
  throw new ControllerError("CONTROLLER_CONTEXT_NOT_FOUND", `the page names no context ${JSON.stringify(value)}`, {
    hint: "Reload the page: it lists the contexts of pi-sandbox context ls.",
    details: { context: String(value) },
  });
}

/** Whether instance `name` of context `context` runs, as last listed. */
export function runsIn(shown: readonly ContextInstances[], context: string, name: string): boolean {
  const group = shown.find((c) => c.context === context);
  return group?.instances.some((v) => v.name === name && v.state === "running") === true;
}
