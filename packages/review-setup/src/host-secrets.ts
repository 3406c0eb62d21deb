// The host side of live credentials: one file per `network.secrets` entry under review-setup's
// state directory (`<dir>/secrets/<instance>/<NAME>`, directory 0700, file 0600), which the
// controller reads at each start and at each `secrets` action. Nothing here goes to the guest.
import { chmod, mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic, type SecretConfig } from "@pi-sandbox/config";
import { callAction, type CallActionOptions } from "@pi-sandbox/controller/client";
import { hostAgentDir } from "./credentials.js";
import { ReviewSetupError } from "./errors.js";
import type { ControllerOptions } from "./guest.js";
import type { InstanceView } from "./instance.js";
import { unsetPlaceholder } from "./placeholder-shape.js";
import { placeholderFile, providerSecrets, secretDeclaration, type LiveSecret } from "./providers.js";

/** `<dir>/secrets/<instance>`: the instance's secret files. */
export function secretsDir(dir: string, instance: string): string {
  return join(dir, "secrets", instance);
}

/**
 * What a secret file holds until live mode puts a credential there: one line that no provider
 * accepts, different per secret (Gondolin refuses a request carrying one secret's value to another
 * secret's hosts, so shared values would turn a 401 into a 403).
 */
export function unsetValue(name: string): string {
  return `unset-${name}-by-review-setup-run-it-with-live-model`;
}

/** Writes one secret file: the directory made 0700, the file replaced atomically, 0600 from its creation. */
export async function writeSecretFile(dir: string, name: string, value: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await chmod(dir, 0o700);
  await writeFileAtomic(join(dir, name), `${value}\n`, 0o600);
}

/** Providers in the host's Pi auth.json (none if it is missing or unreadable). */
export async function hostLoginProviders(env: NodeJS.ProcessEnv): Promise<string[]> {
  try {
    const data = JSON.parse(await readFile(join(hostAgentDir(env), "auth.json"), "utf8")) as unknown;
    return data && typeof data === "object" && !Array.isArray(data) ? Object.keys(data) : [];
  } catch {
    return [];
  }
}

/**
 * The `network.secrets` review-setup adds to an instance it creates: every credential of the
 * providers the host's Pi login has (and `also`, the `--live-model` provider), each read from its
 * file in `secretsDir(dir, instance)`. The files are (re)written with `unsetValue`: no provider is
 * usable from the guest until a live refresh puts its credential in.
 */
export async function declareLiveSecrets(
  dir: string,
  instance: string,
  providers: readonly string[],
): Promise<Record<string, SecretConfig>> {
  const folder = secretsDir(dir, instance);
  const out: Record<string, SecretConfig> = {};
  for (const provider of [...new Set(providers)].sort()) {
    for (const secret of providerSecrets(provider)) {
      await writeSecretFile(folder, secret.name, unsetValue(secret.name));
      if (secret.shape) await writeSecretFile(folder, placeholderName(secret.name), unsetPlaceholder(secret.name));
      out[secret.name] = secretDeclaration(secret, join(folder, secret.name));
    }
  }
  return out;
}

/** File name of a shaped secret's placeholder in the secrets directory (see `placeholderFile`). */
function placeholderName(name: string): string {
  return placeholderFile(name);
}

/**
 * Puts `value` into `secret`'s file (and the unset line into the provider's other secrets, so a
 * login that changed kind leaves nothing usable behind), and a shaped secret's `placeholder` into
 * its placeholder file, then has the controller read the files again: the running VM substitutes
 * the new value from its next request on (and takes the new placeholder, keeping the old ones).
 */
export async function pushLiveSecret(options: {
  dir: string;
  instance: string;
  provider: string;
  secret: LiveSecret;
  value: string;
  /** A shaped secret's placeholder (not secret), written before the controller reads the files. */
  placeholder?: string;
  controller: ControllerOptions;
  callAction?: (input: unknown, options?: CallActionOptions) => Promise<unknown>;
  signal?: AbortSignal;
}): Promise<void> {
  const folder = secretsDir(options.dir, options.instance);
  if (options.placeholder !== undefined) {
    await writeSecretFile(folder, placeholderName(options.secret.name), options.placeholder);
  }
  for (const other of providerSecrets(options.provider)) {
    await writeSecretFile(
      folder,
      other.name,
      other.name === options.secret.name ? options.value : unsetValue(other.name),
    );
  }
  await (options.callAction ?? callAction)(
    { action: "secrets", name: options.instance },
    { ...options.controller, signal: options.signal },
  );
}

/**
 * The instance must declare the secret that carries the credential, for all its hosts: secrets are
 * fixed when an instance is created, and the credential is never copied into the guest instead.
 */
export function requireSecret(name: string, view: InstanceView, secret: LiveSecret, provider: string): void {
  const declared = view.secrets?.find((s) => s.name === secret.name);
  if (declared && secret.hosts.every((host) => declared.hosts.includes(host))) return;
  throw new ReviewSetupError(
    "REVIEW_SETUP_SECRET_MISSING",
    `instance ${name} declares no network.secrets ${secret.name} for ${secret.hosts.join(", ")}, which live mode needs to keep ` +
      `the ${provider} credential on the host; the credential is never copied into the guest instead`,
    {
      hint:
        `Rerun without --config: sandbox:setup --name ${name} --live-model ${provider}/<model> --restart adds the secret ` +
        `to the instance and restarts it as a suspend and resume.`,
      details: { secret: secret.name, hosts: [...secret.hosts], declared: view.secrets ?? [] },
    },
  );
}
