// The user's trust of sandbox.yaml texts that declare secrets or mounts: a model may create from
// such a config only once the user said yes to that exact content. One file per trusted text,
// named by its sha256, so an edited config is a new text and is asked about again.

import { mkdir } from "node:fs/promises";
import { dirname } from "node:path";
import { writeJsonAtomic, type SandboxConfig } from "@pi-sandbox/config";
import { readJson } from "./read-json.js";
import type { StateLayout } from "./layout.js";

/** What is kept of one trusted config. */
export interface TrustedConfig {
  /** When the user said yes. */
  trustedAt: string;
  /** The path it was read from then (information only: the digest is what counts). */
  path: string;
  /** What it declares, as the user was shown it. */
  declares: string[];
}

/** True when the user trusted the config text with this sha256. */
export async function isConfigTrusted(layout: StateLayout, sha256: string): Promise<boolean> {
  return (await readJson<TrustedConfig>(layout.trustFile(sha256))) !== undefined;
}

/** Records the user's trust of the config text with this sha256. */
export async function trustConfig(
  layout: StateLayout,
  sha256: string,
  entry: Omit<TrustedConfig, "trustedAt">,
): Promise<void> {
  const file = layout.trustFile(sha256);
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  await writeJsonAtomic(file, { trustedAt: new Date().toISOString(), ...entry });
}

/** What a config declares that reaches beyond its VM: each secret's source and hosts, each mount. */
export function configDeclares(config: SandboxConfig): string[] {
  const secrets = Object.entries(config.network.secrets ?? {}).map(
    ([name, secret]) => `secret ${name} from ${secret.from} sent to ${secret.hosts.join(", ")}`,
  );
  const mounts = (config.mounts ?? []).map((mount) => `mount ${mount.host} at ${mount.guest} (read-only)`);
  return [...secrets, ...mounts];
}
