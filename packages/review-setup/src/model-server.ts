// `--model-server`: the guest's Pi on an OpenAI-compatible model server of the host (oMLX,
// llama.cpp's llama-server, Ollama, LM Studio). This file is the host's side (the refresh's
// model-server step): the URL and key options, and the server's model list read from the host;
// local-models.ts puts the `local` provider and its extension in the guest.
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { resolve } from "node:path";
import {
  HOST_SERVICES_HOSTNAME,
  SECRET_SOURCE_PATTERN,
  expandHome,
  hasControlChars,
  parseSecretSource,
  secretHostPorts,
  type SecretConfig,
} from "@pi-sandbox/config";
import { ReviewSetupError } from "./errors.js";

/** Where the server is, as the host and as the guest reach it. */
export interface ModelServer {
  /** The URL as given. */
  given: string;
  /** Host port, which the instance lists in `network.hostPorts`. */
  port: number;
  /** OpenAI-compatible base URL on the host, e.g. `http://127.0.0.1:8000/v1`. */
  hostUrl: string;
  /** The same base URL from the guest, e.g. `http://host.sandbox.internal:8000/v1`. */
  guestUrl: string;
  /**
   * `--model-server-key`: where the host reads the server's API key (`env:VAR`, or `file:PATH`
   * made absolute, `~/` kept). The guest gets the placeholder of secret {@link MODEL_SERVER_KEY}.
   */
  key?: string;
}

/**
 * The `network.secrets` name of the model server's key, and the guest variable that holds its
 * placeholder (models.json's `apiKey` is `$MODEL_SERVER_KEY`).
 */
export const MODEL_SERVER_KEY = "MODEL_SERVER_KEY";

/** What the server serves. */
export interface ServedModels {
  /** Model ids in the server's order. */
  ids: string[];
  /**
   * The one the launch command selects: the pinned one (`PI_SANDBOX_LOCAL_MODEL`), else the first
   * the server marks loaded, else the first.
   */
  model: string;
  /** Context windows (tokens) by id, where the list says one; others get Pi's default. */
  contextWindows?: Record<string, number>;
}

/** Host variable that pins the model the launch command selects (an id the server must list). */
export const LOCAL_MODEL_VARIABLE = "PI_SANDBOX_LOCAL_MODEL";

/** Fields of a model list entry that give its context window, in the order they are read. */
export const CONTEXT_WINDOW_FIELDS = ["max_context_window", "context_length", "max_model_len"] as const;

/** The context window an entry states (a positive integer up to 100M tokens), if any. */
export function contextWindowOf(entry: unknown): number | undefined {
  if (typeof entry !== "object" || entry === null) return undefined;
  for (const field of CONTEXT_WINDOW_FIELDS) {
    const value = (entry as Record<string, unknown>)[field];
    if (typeof value === "number" && Number.isInteger(value) && value > 0 && value <= 100_000_000) return value;
  }
  return undefined;
}

const KEY_HINT =
  "Pass the server's API key as --model-server-key env:VAR or --model-server-key file:PATH: it stays on the host (a network.secrets " +
  "entry for the server's host port; the guest holds a placeholder). Or run the server without key checks.";

function usage(message: string, hint: string): ReviewSetupError {
  return new ReviewSetupError("REVIEW_SETUP_USAGE", message, { hint });
}

/**
 * Parses `--model-server-key`: `env:VAR`, or `file:PATH` (relative to `cwd`; `~/` kept for the
 * home directory). Never the key itself: anything else is refused without quoting it.
 */
export function parseModelServerKey(text: string, cwd = process.cwd()): string {
  const hint = "Example: --model-server-key env:OMLX_API_KEY or --model-server-key file:~/.config/omlx/key";
  if (!SECRET_SOURCE_PATTERN.test(text)) {
    throw usage(
      "--model-server-key must name where the host reads the key (env:VAR or file:PATH), never the key itself",
      hint,
    );
  }
  const source = parseSecretSource(text);
  if (source.kind === "env" || source.path.startsWith("~/") || source.path.startsWith("/")) return text;
  return `file:${resolve(cwd, source.path)}`;
}

/** The instance's `network.secrets` entry for the key: sent to the server's host port only. */
export function modelServerSecret(server: ModelServer): Record<string, SecretConfig> {
  if (!server.key) return {};
  return { [MODEL_SERVER_KEY]: { from: server.key, hosts: [`${HOST_SERVICES_HOSTNAME}:${server.port}`] } };
}

/** The key's value, read on the host as the controller reads it (a final line break dropped). */
export async function readModelServerKey(key: string, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const source = parseSecretSource(key);
  const fail = (what: string, hint: string) =>
    new ReviewSetupError("REVIEW_SETUP_USAGE", `--model-server-key ${key}: ${what}`, { hint });
  if (source.kind === "env") {
    const value = env[source.name];
    if (!value) throw fail(`${source.name} is not set`, `Set ${source.name} to the server's API key, then rerun.`);
    return value;
  }
  const file = expandHome(source.path, homedir());
  let value: string;
  try {
    value = (await readFile(file, "utf8")).replace(/\r?\n$/, "");
  } catch (error) {
    throw fail(
      `${file} cannot be read (${(error as NodeJS.ErrnoException).code ?? "error"})`,
      `Put the key in ${file}.`,
    );
  }
  if (value === "" || /[\r\n\0]/.test(value))
    throw fail(`${file} must hold one non-empty line`, `Put the key in ${file}.`);
  return value;
}

/**
 * With a key, an existing instance must declare {@link MODEL_SERVER_KEY} for the server's port:
 * secrets are fixed when an instance is created, and the key never goes into the guest instead.
 */
export function requireModelServerSecret(
  name: string,
  view: { hostPorts?: number[]; secrets?: { name: string; hosts: string[] }[] },
  server: ModelServer,
): void {
  if (!server.key) return;
  const declared = view.secrets?.find((secret) => secret.name === MODEL_SERVER_KEY);
  if (declared && secretHostPorts(declared.hosts, view.hostPorts ?? []).includes(server.port)) return;
  throw new ReviewSetupError(
    "REVIEW_SETUP_SECRET_MISSING",
    `instance ${name} declares no network.secrets ${MODEL_SERVER_KEY} for ${HOST_SERVICES_HOSTNAME}:${server.port}, which --model-server-key needs to keep the key on the host`,
    {
      hint:
        `Secrets are fixed when an instance is created: destroy it (npx pi-sandbox destroy ${name} --confirm ${name}), then create it again ` +
        `with --config <sandbox.yaml> --model-server ${server.given} --model-server-key ${server.key}.`,
      details: { secret: MODEL_SERVER_KEY, declared: view.secrets ?? [] },
    },
  );
}

/**
 * Parses `--model-server`: `http://127.0.0.1:<port>` or `http://localhost:<port>`, optionally
 * with the OpenAI-compatible base path (default `/v1`). Only the host's loopback is reachable
 * from a guest, and only as `host.sandbox.internal`; credentials in the URL are refused.
 */
export function parseModelServer(text: string): ModelServer {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw usage(`--model-server "${text}" is not a URL`, "Example: --model-server http://127.0.0.1:8000");
  }
  if (url.username || url.password) {
    throw usage(`--model-server "${url.host}": a user or key in the URL is not supported`, KEY_HINT);
  }
  if (url.protocol !== "http:") {
    throw usage(
      `--model-server must be an http:// URL; got ${url.protocol}`,
      "Local model servers speak plain HTTP on 127.0.0.1; example: --model-server http://127.0.0.1:8000",
    );
  }
  if (url.hostname !== "127.0.0.1" && url.hostname !== "localhost") {
    throw usage(
      `--model-server must be on this host's 127.0.0.1; got ${url.hostname}`,
      `A guest reaches only the host's 127.0.0.1 ports its instance lists (network.hostPorts), as ${HOST_SERVICES_HOSTNAME}. ` +
        "Run the server on 127.0.0.1 (or 0.0.0.0) and pass http://127.0.0.1:<port>.",
    );
  }
  if (url.search || url.hash) {
    throw usage(`--model-server "${text}" has a query or fragment`, "Pass the server's base URL only.");
  }
  const port = Number(url.port || "80");
  const path = url.pathname.replace(/\/+$/, "") || "/v1";
  return {
    given: text,
    port,
    hostUrl: `http://127.0.0.1:${port}${path}`,
    guestUrl: `http://${HOST_SERVICES_HOSTNAME}:${port}${path}`,
  };
}

const MAX_BODY_BYTES = 4 * 1024 * 1024;
const MAX_MODELS = 500;
const MAX_ID_CHARS = 256;

/**
 * Usable entries of an OpenAI-style model list (`{"data":[{"id":…}]}`): ids that are non-empty,
 * at most 256 characters and free of control characters, without duplicates, at most 500. An entry
 * counts as loaded when the server says so (`status: "loaded"` or `status.value: "loaded"`, as
 * llama.cpp's router does).
 */
export function servedModelsOf(body: unknown): { id: string; loaded: boolean; contextWindow?: number }[] {
  const data = (body as { data?: unknown } | null)?.data;
  if (!Array.isArray(data)) return [];
  const seen = new Map<string, { id: string; loaded: boolean; contextWindow?: number }>();
  for (const entry of data) {
    const { id, status } = (entry ?? {}) as { id?: unknown; status?: unknown };
    if (typeof id !== "string" || id.trim() === "" || id.length > MAX_ID_CHARS || hasControlChars(id)) continue;
    if (seen.has(id)) continue;
    const state = typeof status === "object" && status !== null ? (status as { value?: unknown }).value : status;
    const contextWindow = contextWindowOf(entry);
    seen.set(id, { id, loaded: state === "loaded", ...(contextWindow ? { contextWindow } : {}) });
    if (seen.size === MAX_MODELS) break;
  }
  return [...seen.values()];
}

/** Seams of `readServedModels`. */
export interface ReadServedModelsOptions {
  signal?: AbortSignal;
  /** Longest wait for the answer; default 10 s. */
  timeoutMs?: number;
  /** HTTP client; default the global fetch. */
  fetch?: typeof fetch;
  /** Environment for an `env:` key (default: this process's). */
  env?: NodeJS.ProcessEnv;
}

async function readCapped(response: Response, url: string): Promise<string> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of response.body ?? []) {
    size += (chunk as Uint8Array).length;
    if (size > MAX_BODY_BYTES) {
      throw new ReviewSetupError(
        "REVIEW_SETUP_MODEL_SERVER_NO_MODELS",
        `the answer of ${url} is larger than ${MAX_BODY_BYTES} bytes`,
        { hint: "Check that --model-server is the server's OpenAI-compatible base URL.", details: { url } },
      );
    }
    chunks.push(chunk as Uint8Array);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** `GET <hostUrl>/models` from the host. Errors name the URL and say how to get the server up. */
export async function readServedModels(
  server: ModelServer,
  options: ReadServedModelsOptions = {},
): Promise<ServedModels> {
  const url = `${server.hostUrl}/models`;
  const headers: Record<string, string> = { accept: "application/json" };
  if (server.key) headers.authorization = `Bearer ${await readModelServerKey(server.key, options.env)}`;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const timeout = AbortSignal.timeout(timeoutMs);
  const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout;
  let text: string;
  let status: number;
  try {
    const response = await (options.fetch ?? fetch)(url, { signal, headers });
    status = response.status;
    text = await readCapped(response, url);
  } catch (error) {
    if (options.signal?.aborted) throw options.signal.reason;
    if (error instanceof ReviewSetupError) throw error;
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    const why = timeout.aborted
      ? `no answer in ${timeoutMs / 1000} s`
      : (cause?.code ?? cause?.message ?? String(error));
    throw new ReviewSetupError(
      "REVIEW_SETUP_MODEL_SERVER_UNREACHABLE",
      `the model server at ${url} did not answer (${why})`,
      {
        hint:
          `Start the model server so that it listens on 127.0.0.1:${server.port} (oMLX, llama.cpp's llama-server --port ${server.port}, ` +
          "`ollama serve`, LM Studio's local server) and check that GET " +
          `${url} lists its models, then rerun this command.`,
        details: { url },
        cause: error,
      },
    );
  }
  if (status < 200 || status > 299) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_MODEL_SERVER_REFUSED",
      `the model server at ${url} answered HTTP ${status}`,
      {
        hint:
          status === 401 || status === 403
            ? server.key
              ? `Check that ${server.key} holds the key the server expects (sent as Authorization: Bearer).`
              : KEY_HINT
            : `Check that ${server.hostUrl} is the server's OpenAI-compatible base URL (pass its path if it is not /v1).`,
        details: { url, status },
      },
    );
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const served = servedModelsOf(body);
  if (served.length === 0) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_MODEL_SERVER_NO_MODELS",
      body === undefined ? `the answer of ${url} is not JSON` : `the model server at ${url} lists no models`,
      {
        hint:
          body === undefined
            ? `Check that ${server.hostUrl} is the server's OpenAI-compatible base URL (pass its path if it is not /v1).`
            : "Download or load a model in the server, then rerun this command.",
        details: { url },
      },
    );
  }
  const ids = served.map((m) => m.id);
  const pinned = (options.env ?? process.env)[LOCAL_MODEL_VARIABLE];
  if (pinned && !ids.includes(pinned)) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_MODEL_NOT_SERVED",
      `${LOCAL_MODEL_VARIABLE} pins ${JSON.stringify(pinned.slice(0, 256))}, which the model server at ${url} does not list; ` +
        `it lists ${ids.slice(0, 20).join(", ")}${ids.length > 20 ? `, … (${ids.length} in all)` : ""}`,
      {
        hint: `Set ${LOCAL_MODEL_VARIABLE} to one of the listed ids (or unset it), or load that model in the server; then rerun.`,
        details: { url, pinned, ids },
      },
    );
  }
  const contextWindows = Object.fromEntries(
    served.flatMap((m) => (m.contextWindow ? [[m.id, m.contextWindow] as const] : [])),
  );
  return {
    ids,
    model: pinned || (served.find((m) => m.loaded) ?? served[0]!).id,
    ...(Object.keys(contextWindows).length > 0 ? { contextWindows } : {}),
  };
}
