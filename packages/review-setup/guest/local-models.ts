// A Pi extension that `sandbox:setup --model-server` installs in the guest's isolated agent
// directory (`<agent>/extensions/local-models.ts`, found by Pi's extension discovery). It keeps
// the `local` provider of that directory's models.json in step with the host's model server: the
// provider's model list is read again from `GET <baseUrl>/models` when a session starts and
// whenever Pi refreshes model catalogs (opening /model does). models.json stays the one place
// that names the server (`baseUrl`) and the seed list Pi uses before the first refresh.
//
// Self-contained on purpose: it is copied into the guest as this one file and loaded by Pi
// there, so it imports nothing but Node built-ins and Pi's types.
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import type { ExtensionAPI, ProviderModelConfig } from "@earendil-works/pi-coding-agent";

/** The provider this extension refreshes; review-setup writes it into models.json. */
export const LOCAL_PROVIDER = "local";

/**
 * With `sandbox:setup --model-server-key`, the placeholder of the server's key (the host puts the
 * key in its place on the way to the server); unset otherwise.
 */
export const KEY_VARIABLE = "MODEL_SERVER_KEY";

/** Longest wait for the server when a session starts, and how many refreshes may use it. */
const SESSION_REFRESH_MS = 10_000;
const SESSION_REFRESH_ATTEMPTS = 3;
/** Most models taken from one answer, and the longest id. */
const MAX_MODELS = 500;
const MAX_ID_CHARS = 256;
/** Pi's default context window for a custom model, used when the list says none. */
const DEFAULT_CONTEXT_WINDOW = 128_000;
/**
 * Fields of a list entry that state its context window (oMLX: `max_context_window`, LM Studio and
 * OpenRouter-style lists: `context_length`, vLLM: `max_model_len`; models.json: `contextWindow`).
 */
const CONTEXT_WINDOW_FIELDS = ["max_context_window", "context_length", "max_model_len", "contextWindow"];

/**
 * The model ids of an OpenAI-style `GET /v1/models` answer (`{"data":[{"id":…}]}`), in the
 * server's order, without duplicates or ids that are empty, too long or hold control characters.
 */
export function modelIdsOf(body: unknown): string[] {
  const data = (body as { data?: unknown } | null)?.data;
  if (!Array.isArray(data)) return [];
  const ids = new Set<string>();
  for (const entry of data) {
    const id = (entry as { id?: unknown } | null)?.id;
    if (
      typeof id !== "string" ||
      id.trim() === "" ||
      id.length > MAX_ID_CHARS ||
      /[\u0000-\u001f\u007f-\u009f]/.test(id)
    )
      continue;
    ids.add(id);
    if (ids.size === MAX_MODELS) break;
  }
  return [...ids];
}

/** The context window an entry states (a positive integer up to 100M), if any. */
export function contextWindowOf(entry: unknown): number | undefined {
  if (typeof entry !== "object" || entry === null) return undefined;
  for (const field of CONTEXT_WINDOW_FIELDS) {
    const value = (entry as Record<string, unknown>)[field];
    if (typeof value === "number" && Number.isInteger(value) && value > 0 && value <= 100_000_000) return value;
  }
  return undefined;
}

/** The models of a list answer: `modelIdsOf`'s ids, each with the context window its entry states. */
export function modelsOf(body: unknown): { id: string; contextWindow?: number }[] {
  const data = (body as { data?: unknown } | null)?.data;
  const entries = new Map<string, unknown>();
  if (Array.isArray(data)) {
    for (const entry of data) {
      const id = (entry as { id?: unknown } | null)?.id;
      if (typeof id === "string" && !entries.has(id)) entries.set(id, entry);
    }
  }
  return modelIdsOf(body).map((id) => {
    const contextWindow = contextWindowOf(entries.get(id));
    return contextWindow ? { id, contextWindow } : { id };
  });
}

/**
 * Pi's definition of one served model: a text chat model with Pi's defaults for custom models, and
 * the context window the server states (else Pi's default): a server such as oMLX rejects prompts
 * above its window, so Pi must compact before that.
 */
export function localModel(id: string, baseUrl: string, contextWindow = DEFAULT_CONTEXT_WINDOW): ProviderModelConfig {
  return {
    id,
    name: id,
    api: "openai-completions",
    baseUrl,
    reasoning: false,
    input: ["text"],
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
    contextWindow,
    maxTokens: 16_384,
  };
}

/** The host side of a `host.sandbox.internal:<port>` URL, for messages. */
function hostSide(url: URL): string {
  return url.hostname === "host.sandbox.internal" ? `127.0.0.1:${url.port || "80"} on the host` : url.host;
}

/** Reads the server's model list; errors name the URL and say what to do. */
export async function fetchLocalModels(baseUrl: string, signal?: AbortSignal): Promise<ProviderModelConfig[]> {
  const url = new URL(`${baseUrl.replace(/\/+$/, "")}/models`);
  let response: Response;
  try {
    const key = process.env[KEY_VARIABLE];
    const headers: Record<string, string> = { accept: "application/json" };
    if (key) headers.authorization = `Bearer ${key}`;
    response = await fetch(url, { signal, headers });
  } catch (error) {
    if (signal?.aborted) throw error;
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    throw new Error(
      `Could not reach the model server at ${url.href} (${cause?.code ?? cause?.message ?? String(error)}). ` +
        `Start it so that it listens on ${hostSide(url)}, then open /model to refresh; Pi keeps the models it already lists.`,
    );
  }
  if (!response.ok) {
    throw new Error(
      `The model server at ${url.href} answered HTTP ${response.status}` +
        (response.status === 401 || response.status === 403
          ? process.env[KEY_VARIABLE]
            ? ": it refused the key; check the key file or variable given to sandbox:setup --model-server-key."
            : ": it asks for an API key; rerun sandbox:setup with --model-server-key (a new instance), or turn key checks off in the server."
          : "."),
    );
  }
  let body: unknown;
  try {
    body = await response.json();
  } catch {
    throw new Error(`The model server at ${url.href} did not answer with JSON: is it an OpenAI-compatible server?`);
  }
  return modelsOf(body).map((m) => localModel(m.id, baseUrl, m.contextWindow));
}

/** The seed: the `local` models listed in the agent directory's models.json. */
async function seedModels(baseUrl: string): Promise<ProviderModelConfig[]> {
  const agentDir = process.env.PI_CODING_AGENT_DIR || join(homedir(), ".pi", "agent");
  try {
    const config = JSON.parse(await readFile(join(agentDir, "models.json"), "utf8")) as {
      providers?: Record<string, { models?: unknown }>;
    };
    return modelsOf({ data: config.providers?.[LOCAL_PROVIDER]?.models }).map((m) =>
      localModel(m.id, baseUrl, m.contextWindow),
    );
  } catch {
    return [];
  }
}

export default function localModels(pi: ExtensionAPI): void {
  let live: ProviderModelConfig[] | undefined;
  pi.registerProvider(LOCAL_PROVIDER, {
    // Pi passes the provider's baseUrl from models.json. Its cache-only phase (no network) gets the
    // last list read in this process, or the seed; its network phase asks the server.
    async refreshModels(context) {
      const baseUrl = context.baseUrl;
      if (!baseUrl) return [];
      if (!context.allowNetwork) return live ?? (await seedModels(baseUrl));
      live = await fetchLocalModels(baseUrl, context.signal);
      return live;
    },
  });
  pi.on("session_start", async (_event, ctx) => {
    // Every mode, before the first prompt (PI_OFFLINE leaves the seed). Pi ends a provider's
    // refresh without a word when another refresh of it starts (it starts offline ones of every
    // provider when a provider or model registers), so one that read nothing is asked again,
    // within the same bound.
    const signal = AbortSignal.timeout(SESSION_REFRESH_MS);
    const offline = process.env.PI_OFFLINE !== undefined;
    for (let attempt = 0; attempt < SESSION_REFRESH_ATTEMPTS && !signal.aborted; attempt++) {
      const result = await ctx.modelRegistry.refresh({ providers: [LOCAL_PROVIDER], signal });
      const error = result.errors.get(LOCAL_PROVIDER);
      if (error) ctx.ui.notify(error.message, "warning");
      if (error || offline || live !== undefined) return;
    }
  });
}
