// The user's trust of sandbox.yaml files that reach the host (secrets, mounts, host ports, host
// files, boot images): a model may create from such a config only once the user said yes to that
// exact file. One file per yes, named by its key (the config's path, text and resolved reaches), so
// an edited config, the same text elsewhere, or a link that now leads elsewhere is asked again.

import { createHash } from "node:crypto";
import { mkdir, realpath } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname } from "node:path";
import {
  configReaches,
  expandHome,
  isPathWithin,
  reachPath,
  writeJsonAtomic,
  type ConfigReach,
  type SandboxConfig,
} from "@pi-sandbox/config";
import { imageCacheRoot } from "@pi-sandbox/image";
import { readJson } from "./read-json.js";
import type { StateLayout } from "./layout.js";

/** What is kept of one trusted config. */
export interface TrustedConfig {
  /** When the user said yes. */
  trustedAt: string;
  /** The path it was read from (real). */
  path: string;
  /** What it reaches on the host, resolved, as the user was shown it. */
  declares: string[];
}

/** True when the user trusted the config with this {@link configTrustKey}. */
export async function isConfigTrusted(layout: StateLayout, key: string): Promise<boolean> {
  return (await readJson<TrustedConfig>(layout.trustFile(key))) !== undefined;
}

/** Records the user's trust of the config with this {@link configTrustKey}. */
export async function trustConfig(
  layout: StateLayout,
  key: string,
  entry: Omit<TrustedConfig, "trustedAt">,
): Promise<void> {
  const file = layout.trustFile(key);
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  await writeJsonAtomic(file, { trustedAt: new Date().toISOString(), ...entry });
}

/**
 * A config's reaches with every host path made absolute (`~/` from `env.HOME`) and real (symlinks
 * followed). An image inside the user's own image store (`pi-sandbox image build` or `import`
 * put it there) is left out, as its name would be.
 */
export async function resolveReaches(config: SandboxConfig, env: NodeJS.ProcessEnv): Promise<ConfigReach[]> {
  const home = env.HOME || homedir();
  const store = imageCacheRoot(env);
  const storeReal = await realpath(store).catch(() => store);
  const resolved = await Promise.all(
    configReaches(config).map(async (reach) => {
      const path = reachPath(reach);
      if (path === undefined) return reach;
      const absolute = expandHome(path, home);
      const real = await realpath(absolute).catch(() => absolute);
      if (reach.kind === "boot-asset" && isPathWithin(real, storeReal)) return undefined;
      return { ...reach, given: reach.value === "source" ? `file:${real}` : real };
    }),
  );
  return resolved.filter((reach) => reach !== undefined);
}

/**
 * What a yes to a config is a yes to: its path, its text and what it reaches once resolved, so the
 * same text in another directory, or a link that now leads elsewhere, is asked about again.
 */
export function configTrustKey(configPath: string, textSha256: string, declares: readonly string[]): string {
  return createHash("sha256").update(JSON.stringify({ configPath, textSha256, declares })).digest("hex");
}
