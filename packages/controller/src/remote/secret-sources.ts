// Where the secrets of an entry made through a context are read on this machine. The far side's
// copy of the config names environment variables only, and its controller reads them at every
// start from the environment of the call that started it; so every call for that entry carries
// the values again, read here from the sources kept here (`contexts/<context>/<kind>/<name>.json`
// in the config directory, 0600; sources only, never a value). They are kept before the call that
// makes the entry is sent: Ctrl-C (or a lost connection) ends the wait here while the create goes
// on there, and the entry's next start must still find them.

import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { writeJsonAtomic } from "@pi-sandbox/config";
import { ControllerError, isControllerError } from "../errors.js";
import { configDir } from "../state/contexts.js";
import type { EntryKind } from "../state/layout.js";
import { readJson } from "../state/read-json.js";
import { readSecret } from "./ship-config.js";

/** Variable → source (`env:NAME`, `file:/abs`). */
export type SecretSources = Record<string, string>;

function sourcesFile(env: NodeJS.ProcessEnv, context: string, kind: EntryKind, name: string): string {
  return join(configDir(env), "contexts", context, kind, `${name}.json`);
}

/** Keeps the sources of `name` (names are checked by the action's validation before this). */
export async function rememberSources(
  env: NodeJS.ProcessEnv,
  context: string,
  kind: EntryKind,
  name: string,
  sources: SecretSources,
): Promise<void> {
  const file = sourcesFile(env, context, kind, name);
  if (Object.keys(sources).length === 0) {
    await rm(file, { force: true });
    return;
  }
  await mkdir(join(configDir(env), "contexts", context, kind), { recursive: true, mode: 0o700 });
  await writeJsonAtomic(file, sources);
}

/** The sources kept for `name`, or none. */
export async function sourcesOf(
  env: NodeJS.ProcessEnv,
  context: string,
  kind: EntryKind,
  name: string,
): Promise<SecretSources> {
  return (await readJson<SecretSources>(sourcesFile(env, context, kind, name))) ?? {};
}

/** Forgets `name`'s sources (after a destroy). */
export async function forgetSources(
  env: NodeJS.ProcessEnv,
  context: string,
  kind: EntryKind,
  name: string,
): Promise<void> {
  await rm(sourcesFile(env, context, kind, name), { force: true });
}

/**
 * The values of `sources`, read here now. One that cannot be read is left out: the far side's
 * start then fails with CONTROLLER_SECRET_UNAVAILABLE naming the secret, and other actions
 * (stop, exec) need none.
 */
export async function readSources(env: NodeJS.ProcessEnv, sources: SecretSources): Promise<Record<string, string>> {
  const values: Record<string, string> = {};
  for (const [variable, source] of Object.entries(sources)) {
    try {
      values[variable] = await readSecret(source, env, "", variable);
    } catch {
      // left out, as said above
    }
  }
  return values;
}

/**
 * Keeps `sources` for each entry an action is about to make, before it is sent; resolves with what
 * undoes that when the far side answers that the name is taken (the entry there is another's, or
 * was made before, and its own sources stay), and rethrows. Any other failure keeps them: the
 * far side may have made the entry (a create interrupted, a setup that failed) and then needs them.
 */
export async function keepAhead(
  env: NodeJS.ProcessEnv,
  context: string,
  entries: readonly { kind: EntryKind; name: string }[],
  sources: SecretSources,
): Promise<(error: unknown) => Promise<never>> {
  const before: { kind: EntryKind; name: string; sources: SecretSources }[] = [];
  for (const entry of entries) {
    before.push({ ...entry, sources: await sourcesOf(env, context, entry.kind, entry.name) });
    await rememberSources(env, context, entry.kind, entry.name, sources);
  }
  return async (error) => {
    if (isControllerError(error, "CONTROLLER_ALREADY_EXISTS")) {
      for (const entry of before) await rememberSources(env, context, entry.kind, entry.name, entry.sources);
    }
    throw error;
  };
}

/** A variable the laptop names in a config it sends (ship-config.ts). */
const SHIPPED_VARIABLE = /^env:(PI_SANDBOX_CONTEXT_SECRET_\d+)$/;

/**
 * The far side's CONTROLLER_SECRET_UNAVAILABLE for a secret this machine sends, said as it is here:
 * its source here could not be read (set it), or this machine does not know where it is read (the
 * entry was made from another machine, or by a version that did not keep them: make it again).
 * Any other error comes back as it is.
 */
export async function explainSecretUnavailable(
  error: unknown,
  sources: SecretSources,
  env: NodeJS.ProcessEnv,
  context: string,
  args: Record<string, unknown>,
): Promise<unknown> {
  if (!isControllerError(error, "CONTROLLER_SECRET_UNAVAILABLE")) return error;
  const variable = SHIPPED_VARIABLE.exec(String(error.details?.from ?? ""))?.[1];
  if (!variable) return error;
  const secret = String(error.details?.secret ?? variable);
  const name = String(args.name ?? "");
  const source = sources[variable];
  if (source) {
    return readSecret(source, env, name, secret).then(
      () => error,
      (unreadable: unknown) => unreadable,
    );
  }
  return new ControllerError(
    "CONTROLLER_SECRET_UNAVAILABLE",
    `secret ${secret} of ${name} is read on this machine and sent to context ${context}, but this machine does not know where from (it keeps that for what it creates through the context: ${name} was made from another machine, or by an older pi-sandbox)`,
    {
      hint: `Destroy ${name} and create it again from its sandbox.yaml through this context: pi-sandbox destroy ${name} --context ${context}, then pi-sandbox create ${name} -c sandbox.yaml --context ${context}.`,
      details: { secret, context, name },
      cause: error,
    },
  );
}
