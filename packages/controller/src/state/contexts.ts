// Contexts: where actions run. `local` is this machine's own state root and always exists; any
// other is another machine reached over ssh (`ssh://[user@]host[:port]`), kept by name in the
// user's config directory (`contexts.json`, 0600 in a 0700 directory) with the one in use.
// Names and URLs are checked before anything touches the disk, and an ssh destination that could
// be read as an ssh option is refused.

import { mkdir, rm } from "node:fs/promises";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { writeJsonAtomic } from "@pi-sandbox/config/core";
import { ControllerError } from "../errors.js";
import { readJson } from "./read-json.js";

/** The context that is this machine. */
export const LOCAL_CONTEXT = "local";

/** A context name: a letter or digit, then letters, digits, `.`, `_`, `-`; at most 63. */
const CONTEXT_NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/i;

/** One ssh destination, parsed from `ssh://[user@]host[:port]`. */
export interface SshTarget {
  /** The URL as stored. */
  url: string;
  user?: string;
  host: string;
  port?: number;
}

/** A stored context. */
export interface ContextEntry {
  name: string;
  /** `ssh://[user@]host[:port]`. */
  url: string;
}

/** The file's shape. */
interface ContextFile {
  version: 1;
  /** The context `context use` picked; absent: local. */
  current?: string;
  contexts: Record<string, { url: string }>;
}

/** The config directory: `$XDG_CONFIG_HOME/pi-sandbox`, else `~/.config/pi-sandbox`. */
export function configDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.XDG_CONFIG_HOME) return resolve(env.XDG_CONFIG_HOME, "pi-sandbox");
  return join(env.HOME ?? homedir(), ".config", "pi-sandbox");
}

function contextsFile(env: NodeJS.ProcessEnv): string {
  return join(configDir(env), "contexts.json");
}

/** Throws CONTROLLER_CONTEXT_INVALID unless `name` may name a new context. */
export function assertContextName(name: unknown): asserts name is string {
  if (typeof name !== "string" || !CONTEXT_NAME.test(name)) {
    throw new ControllerError("CONTROLLER_CONTEXT_INVALID", `${JSON.stringify(name)} is not a context name`, {
      hint: "Use a letter or digit, then letters, digits, '.', '_' or '-' (at most 63), e.g. pi-sandbox context add big ssh://me@big.lan",
    });
  }
}

/** A user or host of an ssh URL: no option-like leading `-`, no spaces or shell or ssh specials. */
const SSH_WORD = /^[A-Za-z0-9_][A-Za-z0-9._-]*$/;
/** A bracketed IPv6 literal. */
const IPV6 = /^\[[0-9a-fA-F:.]+\]$/;

/** Parses `ssh://[user@]host[:port]`; CONTROLLER_CONTEXT_INVALID names what is wrong. */
export function parseSshUrl(text: string): SshTarget {
  const invalid = (why: string) =>
    new ControllerError("CONTROLLER_CONTEXT_INVALID", `${JSON.stringify(text)} is not an ssh URL: ${why}`, {
      hint: "Write ssh://[user@]host[:port], e.g. ssh://me@big.lan or ssh://big:2222; a Host alias of your ssh config works too (ssh://big).",
    });
  if (!text.startsWith("ssh://")) throw invalid("it must start with ssh://");
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw invalid("it does not parse");
  }
  if (url.password) throw invalid("it holds a password; use your ssh keys or agent");
  if ((url.pathname && url.pathname !== "/") || url.search || url.hash)
    throw invalid("only user, host and port are taken");
  const user = url.username ? decodeURIComponent(url.username) : undefined;
  if (user !== undefined && !SSH_WORD.test(user)) throw invalid(`the user ${JSON.stringify(user)} is not a user name`);
  const host = url.hostname;
  if (!host || !(SSH_WORD.test(host) || IPV6.test(host))) throw invalid("the host is missing or not a host name");
  const port = url.port ? Number(url.port) : undefined;
  return {
    url: text,
    ...(user !== undefined ? { user } : {}),
    host: IPV6.test(host) ? host.slice(1, -1) : host,
    ...(port !== undefined ? { port } : {}),
  };
}

async function readFileOf(env: NodeJS.ProcessEnv): Promise<ContextFile> {
  const file = await readJson<ContextFile>(contextsFile(env));
  return file && typeof file.contexts === "object" && file.contexts ? file : { version: 1, contexts: {} };
}

async function writeFileOf(env: NodeJS.ProcessEnv, file: ContextFile): Promise<void> {
  await mkdir(configDir(env), { recursive: true, mode: 0o700 });
  await writeJsonAtomic(contextsFile(env), file);
}

function notFound(name: string): ControllerError {
  return new ControllerError("CONTROLLER_CONTEXT_NOT_FOUND", `there is no context ${JSON.stringify(name)}`, {
    hint: "List them with pi-sandbox context ls; add one with pi-sandbox context add NAME ssh://[user@]host[:port].",
    details: { name },
  });
}

/** Every context, `local` first, and the one in use. */
export async function listContexts(
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ current: string; contexts: ContextEntry[] }> {
  const file = await readFileOf(env);
  const stored = Object.entries(file.contexts)
    .map(([name, { url }]) => ({ name, url }))
    .sort((a, b) => a.name.localeCompare(b.name));
  const current = file.current !== undefined && file.contexts[file.current] ? file.current : LOCAL_CONTEXT;
  return { current, contexts: [{ name: LOCAL_CONTEXT, url: "" }, ...stored] };
}

/** Adds context `name` for `url`; CONTROLLER_CONTEXT_EXISTS when the name is taken. */
export async function addContext(
  name: string,
  url: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<ContextEntry> {
  assertContextName(name);
  parseSshUrl(url);
  const file = await readFileOf(env);
  if (name === LOCAL_CONTEXT || file.contexts[name]) {
    throw new ControllerError("CONTROLLER_CONTEXT_EXISTS", `context ${name} exists already`, {
      hint:
        name === LOCAL_CONTEXT
          ? "local is this machine; pick another name."
          : `Remove it first (pi-sandbox context rm ${name}) or pick another name.`,
      details: { name },
    });
  }
  file.contexts[name] = { url };
  await writeFileOf(env, file);
  return { name, url };
}

/** Removes context `name`; the one in use falls back to local. */
export async function removeContext(name: string, env: NodeJS.ProcessEnv = process.env): Promise<ContextEntry> {
  assertContextName(name);
  if (name === LOCAL_CONTEXT) {
    throw new ControllerError("CONTROLLER_CONTEXT_INVALID", "local is this machine and cannot be removed", {
      hint: "Switch back to it with pi-sandbox context use local.",
    });
  }
  const file = await readFileOf(env);
  const entry = file.contexts[name];
  if (!entry) throw notFound(name);
  delete file.contexts[name];
  if (file.current === name) delete file.current;
  await writeFileOf(env, file);
  // What was kept here for its entries (where their secrets are read: remote/secret-sources.ts).
  await rm(join(configDir(env), "contexts", name), { recursive: true, force: true });
  return { name, url: entry.url };
}

/** Makes `name` the context commands use when none is given. */
export async function useContext(name: string, env: NodeJS.ProcessEnv = process.env): Promise<ContextEntry> {
  assertContextName(name);
  const file = await readFileOf(env);
  if (name !== LOCAL_CONTEXT && !file.contexts[name]) throw notFound(name);
  if (name === LOCAL_CONTEXT) delete file.current;
  else file.current = name;
  await writeFileOf(env, file);
  return { name, url: name === LOCAL_CONTEXT ? "" : file.contexts[name]!.url };
}

/**
 * The context a call runs in: `given` (`--context`), else `PI_SANDBOX_CONTEXT`, else the one in
 * use. Undefined for local; the context's name and ssh target otherwise.
 */
export async function selectContext(
  given: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): Promise<(SshTarget & { name: string }) | undefined> {
  const asked = given ?? (env.PI_SANDBOX_CONTEXT || undefined);
  if (asked === LOCAL_CONTEXT) return undefined;
  if (asked !== undefined) assertContextName(asked);
  const file = await readFileOf(env);
  const name = asked ?? file.current;
  if (name === undefined) return undefined;
  const entry = file.contexts[name];
  if (!entry) {
    if (asked === undefined) return undefined; // a stale `current`: local, as listContexts says
    throw notFound(name);
  }
  return { name, ...parseSshUrl(entry.url) };
}
