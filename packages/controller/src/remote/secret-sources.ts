// Where the secrets of an entry made through a context are read on this machine. The far side's
// copy of the config names environment variables only, and its controller reads them at every
// start from the environment of the call that started it; so every call for that entry carries
// the values again, read here from the sources kept here (`contexts/<context>/<kind>/<name>.json`
// in the config directory, 0600; sources only, never a value).

import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { writeJsonAtomic } from "@pi-sandbox/config";
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
