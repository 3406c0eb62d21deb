// An action sent to another machine (a context): what stays here is done here first (the model
// guard's checks and the user's answers were made by the caller; the config and its secrets are
// read here), the action runs there, and what comes back is made usable here: the previews it
// names are forwarded to the same loopback address and port on this machine (so the Host guard
// and each instance's cookie jar work as they do locally, and the printed URL is this machine's),
// and a copy's bytes move with scp through the context's ssh master.

import { stat } from "node:fs/promises";
import { basename, join } from "node:path";
import { imageCacheRoot, inspectImage } from "@pi-sandbox/image";
import type { ActionSpec } from "../actions/kit/define.js";
import { ControllerError, isControllerError } from "../errors.js";
import type { SshTarget } from "../state/contexts.js";
import type { Caller, ProgressEvent, TrustNote } from "../wire.js";
import { connectContext, type RemoteConnection } from "./connection.js";
import { shipConfig } from "./ship-config.js";
import { explainSecretUnavailable, forgetSources, keepAhead, readSources, sourcesOf } from "./secret-sources.js";
import { laptopIdentity, recordedContextCall } from "./laptop-ledger.js";
import { auditThroughContext } from "./audit-through.js";
import { forkNames } from "../actions/fork.js";
import type { EntryKind } from "../state/layout.js";
import { ensureControlDir, forwardPort, remotePath, scp } from "./ssh.js";
import { traceMark } from "../trace.js";

/** Actions that always run here: they concern this machine, or the contexts themselves. */
const HERE = new Set(["help", "init", "context-add", "context-ls", "context-use", "context-rm"]);
/** Actions that cannot go through a context yet, with what to do instead. */
const NOT_YET: Record<string, string> = {
  shell: "Run pi-sandbox shell NAME --context CONTEXT on a terminal: the session then runs there over ssh.",
  "workspace-export": "Export on that machine.",
};

/** True when `spec` runs on the context's machine rather than here. */
export function runsRemotely(spec: Pick<ActionSpec, "name">): boolean {
  return !HERE.has(spec.name);
}

/** What a remote call needs from the caller. */
export interface RemoteCallOptions {
  env: NodeJS.ProcessEnv;
  caller: Caller;
  trust: TrustNote[];
  signal?: AbortSignal;
  onProgress?: (event: ProgressEvent) => void;
  /** The call is the model's (its host paths were checked here already). */
  model: boolean;
}

async function isDirectory(path: string): Promise<boolean> {
  return (await stat(path).catch(() => undefined))?.isDirectory() === true;
}

/**
 * Runs `args` (a validated action) on context `context`, and records it in this machine's ledger of
 * the context (remote/laptop-ledger.ts); `audit` and `audit verify` read both machines' ledgers.
 */
export async function callThroughContext(
  spec: ActionSpec,
  args: Record<string, unknown>,
  context: SshTarget & { name: string },
  options: RemoteCallOptions,
): Promise<unknown> {
  if (spec.name === "audit" || spec.name === "audit-verify") {
    return auditThroughContext(spec.name, args, context.name, options.env, (action) =>
      sendThroughContext(spec, action, context, options),
    );
  }
  return recordedContextCall(
    options.env,
    { context: context.name, args, caller: options.caller, trust: options.trust },
    () => sendThroughContext(spec, args, context, options),
    options.signal,
  );
}

/** {@link callThroughContext} without the ledger here. */
async function sendThroughContext(
  spec: ActionSpec,
  args: Record<string, unknown>,
  context: SshTarget & { name: string },
  options: RemoteCallOptions,
): Promise<unknown> {
  const refuse = (message: string, hint: string) =>
    new ControllerError("CONTROLLER_CONTEXT_REFUSED", message, {
      hint,
      details: { context: context.name, action: spec.name },
    });
  const notYet = NOT_YET[spec.name];
  if (notYet) {
    const what =
      spec.name === "shell" ? "goes through a context only on a terminal" : "does not go through a context yet";
    throw refuse(`${spec.name} ${what} (context ${context.name})`, notYet.replace("CONTEXT", context.name));
  }
  if (spec.name === "download" && options.model) {
    throw refuse("a model's download does not go through a context", "Ask the user to run the pi-sandbox cp command.");
  }
  const { env } = options;
  // The connection opens (or is taken from an early start) while what is read here is read; its
  // failure is reported once that is done, so a config refused here is said first.
  const connecting = connectContext(context.name, context, env);
  connecting.catch(() => undefined);
  // The entry's secrets, read here again: a controller the call starts there reads them from it.
  const entry = typeof args.name === "string" ? { kind: kindOf(args), name: args.name } : undefined;
  let sources =
    spec.name === "create" && typeof args.template === "string"
      ? await sourcesOf(env, context.name, "templates", args.template)
      : entry
        ? await sourcesOf(env, context.name, entry.kind, entry.name)
        : {};
  const secrets = await readSources(env, sources);
  let connection: RemoteConnection | undefined;
  let reforwarding: Promise<void> | undefined;
  /** The connection, and on a new master the running instances' previews forwarded again beside the call. */
  const connected = async (): Promise<RemoteConnection> => {
    if (connection) return connection;
    connection = await connecting;
    if (connection.newMaster) {
      // A new master (the first command, or after the connection was lost): forward every running
      // instance's previews again, as the one that went away did.
      connection.newMaster = false;
      const listing = connection.request({
        type: "call",
        action: { action: "list" },
        caller: options.caller,
        from: laptopIdentity(),
      });
      reforwarding = listing.then(
        (listed) => forwardPreviews(listed, connection!, context, env, options.onProgress),
        (error: unknown) =>
          options.onProgress?.({
            stage: "preview",
            message: `the previews of context ${context.name} are not forwarded again: ${(error as Error).message}`,
          }),
      );
    }
    return connection;
  };
  const call = async (
    action: Record<string, unknown>,
    extra: { config?: { text: string; name: string }; secrets?: Record<string, string> } = {},
  ) => {
    const through = await connected();
    traceMark(`context: call ${String(action.action)} sent`);
    return through.request(
      {
        type: "call",
        action,
        caller: options.caller,
        from: laptopIdentity(),
        ...(options.trust.length ? { trust: options.trust } : {}),
        ...(Object.keys(secrets).length > 0 ? { secrets } : {}),
        ...extra,
      },
      {
        ...(options.signal ? { signal: options.signal } : {}),
        ...(options.onProgress ? { onProgress: options.onProgress } : {}),
      },
    );
  };
  let result: unknown;
  try {
    if (typeof args.config === "string") {
      const shipped = await shipConfig(args.config, context.name, env);
      sources = shipped.sources;
      await connected();
      const undo = await keepAhead(env, context.name, madeBy(spec.name, args), sources);
      result = await call(args, { config: shipped.config, secrets: shipped.secrets }).catch(undo);
    } else if (spec.name === "upload" || spec.name === "download") {
      result = await copyThrough(await connected(), context, spec.name, args, call, env);
    } else if (spec.name === "image-push") {
      result = await pushImage(await connected(), context, String(args.name), call, env);
    } else if (spec.name === "image-import") {
      const name = typeof args.name === "string" ? args.name : undefined;
      result = await importDir(await connected(), context, String(args.dir), name, call, env);
    } else {
      await connected();
      const undo = await keepAhead(env, context.name, madeBy(spec.name, args), sources);
      result = await call(args).catch(undo);
    }
  } catch (error) {
    await reforwarding;
    // A destroy of what the far side no longer has: nothing is left there to read secrets for.
    if (spec.name === "destroy" && entry && isControllerError(error, "CONTROLLER_NOT_FOUND"))
      await forgetSources(env, context.name, entry.kind, entry.name);
    throw await explainSecretUnavailable(error, sources, env, context.name, args);
  }
  await reforwarding;
  traceMark(`context: call ${spec.name} answered`);
  if (spec.name === "destroy" && entry) await forgetSources(env, context.name, entry.kind, entry.name);
  await forwardPreviews(result, connection!, context, env, options.onProgress);
  traceMark("context: previews forwarded");
  return result;
}

/**
 * The entries an action makes, whose secret sources are kept here before it is sent (create,
 * prepare, fork); none for the others.
 */
function madeBy(action: string, args: Record<string, unknown>): { kind: EntryKind; name: string }[] {
  if (typeof args.name !== "string") return [];
  if (action === "create" || action === "prepare") return [{ kind: kindOf(args), name: args.name }];
  if (action !== "fork") return [];
  const names = Array.isArray(args.names) ? args.names.map(String) : forkNames(args.name, Number(args.count ?? 0));
  return names.map((name) => ({ kind: "instances" as const, name }));
}

/** The namespace an action's `name` is in. */
function kindOf(args: Record<string, unknown>): EntryKind {
  if (args.action === "prepare") return "templates";
  return args.kind === "templates" ? "templates" : "instances";
}

/** `cp` through a context: scp to (or from) a private staging directory there, the copy itself there. */
async function copyThrough(
  connection: RemoteConnection,
  context: SshTarget,
  action: "upload" | "download",
  args: Record<string, unknown>,
  call: (action: Record<string, unknown>) => Promise<unknown>,
  env: NodeJS.ProcessEnv,
): Promise<unknown> {
  const dir = await ensureControlDir(env);
  const { dir: stage } = (await connection.request({ type: "stage" })) as { dir: string };
  try {
    if (action === "upload") {
      const from = (Array.isArray(args.from) ? args.from : [args.from]).map(String);
      await scp(
        context,
        dir,
        from.map((p) => p.replace(/\/+$/, "") || "/"),
        remotePath(context, `${stage}/`),
        env,
      );
      const staged = from.map((p) => `${join(stage, basename(p))}${p.endsWith("/") ? "/" : ""}`);
      return await call({ ...args, from: Array.isArray(args.from) ? staged : staged[0] });
    }
    const to = String(args.to);
    const from = Array.isArray(args.from) ? args.from.map(String) : [String(args.from)];
    const into = to.endsWith("/") || (await isDirectory(to));
    // One source to a new name: it is copied there as `x`, then to exactly `to`.
    const staged = into ? `${stage}/` : join(stage, "x");
    const result = (await call({ ...args, to: staged })) as Record<string, unknown>;
    const names = into ? from.map((p) => basename(p.replace(/\/+$/, ""))) : ["x"];
    const sources = names.some((n) => n === "" || n === ".") ? [`${stage}/*`] : names.map((n) => join(stage, n));
    await scp(
      context,
      dir,
      sources.map((p) => remotePath(context, p)),
      to,
      env,
    );
    return { ...result, to };
  } finally {
    await connection.request({ type: "unstage", dir: stage }).catch(() => undefined);
  }
}

/** `image push`: the image's directory here, by scp to a staging directory there, imported there. */
async function pushImage(
  connection: RemoteConnection,
  context: SshTarget,
  name: string,
  call: (action: Record<string, unknown>) => Promise<unknown>,
  env: NodeJS.ProcessEnv,
): Promise<unknown> {
  const image = await inspectImage(imageCacheRoot(env), name);
  return importDir(connection, context, image.dir, image.name ?? name, call, env);
}

/**
 * `image import DIR` (and push): an assets directory here, by scp to a staging directory there,
 * imported there (checked against its manifest), under `name` (there's default without one).
 */
async function importDir(
  connection: RemoteConnection,
  context: SshTarget,
  imageDir: string,
  name: string | undefined,
  call: (action: Record<string, unknown>) => Promise<unknown>,
  env: NodeJS.ProcessEnv,
): Promise<unknown> {
  const from = imageDir.replace(/\/+$/, "") || "/";
  const dir = await ensureControlDir(env);
  const { dir: stage } = (await connection.request({ type: "stage" })) as { dir: string };
  try {
    await scp(context, dir, [from], remotePath(context, `${stage}/`), env);
    return await call({ action: "image-import", dir: join(stage, basename(from)), ...(name ? { name } : {}) });
  } finally {
    await connection.request({ type: "unstage", dir: stage }).catch(() => undefined);
  }
}

/** A preview URL's address and port, when it is a loopback one. */
const PREVIEW_URL = /^http:\/\/(127\.\d{1,3}\.\d{1,3}\.\d{1,3}):(\d{1,5})\//;

/** Every preview URL in a result (lists, views, `started`), without repeats. */
function previewUrls(value: unknown, found = new Set<string>()): Set<string> {
  if (Array.isArray(value)) for (const item of value) previewUrls(item, found);
  else if (value && typeof value === "object") {
    for (const [key, inner] of Object.entries(value)) {
      if (key === "url" && typeof inner === "string" && PREVIEW_URL.test(inner)) found.add(inner);
      else previewUrls(inner, found);
    }
  }
  return found;
}

/**
 * Forwards each preview the result names from the same address and port here, through the
 * context's master (the forward lives as long as it; any later command through the context
 * forwards again, asking the master only for what this connection has not forwarded yet). A port
 * taken here is reported, not fatal.
 */
async function forwardPreviews(
  result: unknown,
  connection: RemoteConnection,
  context: SshTarget & { name: string },
  env: NodeJS.ProcessEnv,
  onProgress?: (event: ProgressEvent) => void,
): Promise<void> {
  const urls = previewUrls(result);
  if (urls.size === 0) return;
  const dir = await ensureControlDir(env);
  await Promise.all(
    [...urls].map(async (url) => {
      const [, address, port] = PREVIEW_URL.exec(url)!;
      const spec = `${address}:${port}`;
      if (connection.forwarded.has(spec)) return;
      try {
        await forwardPort(context, dir, spec, spec, env);
        connection.forwarded.add(spec);
      } catch (error) {
        onProgress?.({
          stage: "preview",
          message: `${url} is not forwarded from context ${context.name}: ${(error as Error).message}`,
        });
      }
    }),
  );
}
