// `network.secrets` and `mounts` of a config, made ready for a boot on this host: each secret's
// value read from its source (the daemon's environment, which is the environment of the client
// that started it, or a host file) at every start, with a placeholder that stays the same for the
// instance across starts; each mount's host directory checked against the directories no guest
// may see. No message, log line or detail here ever holds a value.

import { createHash, randomBytes } from "node:crypto";
import { open, realpath, stat } from "node:fs/promises";
import { homedir } from "node:os";
import {
  HOST_REACH_KINDS,
  LIMITS,
  escapeControlChars,
  expandHome,
  reachPath,
  parseSecretSource,
  SHAPED_PLACEHOLDER_PATTERN,
  type SandboxConfig,
  type SecretConfig,
} from "@pi-sandbox/config";
import type { VmMount, VmSecret } from "@pi-sandbox/vm";
import { ControllerError } from "../errors.js";
import { hostPlaces, protectedPlace } from "../host-places.js";
import { resolveReaches } from "../state/config-trust.js";

/** A new random salt for an entry's placeholders (kept in its record). */
export function newSecretSalt(): string {
  return randomBytes(16).toString("hex");
}

/**
 * The placeholder the guest sees for secret `name`: derived from the entry's salt, so it is the
 * same at every start (a guest file that stored it keeps working) and differs between entries
 * that do not share a disk. `prefix` (the secret's `placeholderPrefix`, checked by the config)
 * goes in front.
 */
export function placeholderFor(salt: string, name: string, prefix = ""): string {
  const digest = createHash("sha256").update(`pi-sandbox secret\0${salt}\0${name}`).digest("hex");
  return `${prefix}PI_SANDBOX_SECRET_${digest.slice(0, 40)}`;
}

/** Where `resolveSecrets` reads: the environment and the home directory for `~/`. */
export interface SecretResolution {
  /** The entry's placeholder salt. */
  salt: string;
  /** Environment for `env:` sources (default: this process's). */
  env?: NodeJS.ProcessEnv;
  /** Home directory for `~/` (default: the OS's). */
  home?: string;
  /** The state root: a `placeholderFrom` file in or around it, or in any protected place, is refused. */
  stateRoot: string;
}

/** Reads every secret of the config; CONTROLLER_SECRET_UNAVAILABLE names the first that fails. */
export async function resolveSecrets(
  config: SandboxConfig,
  options: SecretResolution,
): Promise<Record<string, VmSecret>> {
  const out: Record<string, VmSecret> = {};
  // A record written before network.secrets existed has none.
  for (const [name, secret] of Object.entries(config.network.secrets ?? {})) {
    out[name] = {
      value: await readSecretValue(name, secret, options),
      placeholder: await secretPlaceholder(name, secret, options),
      hosts: [...secret.hosts],
      ...(secret.headers ? { headers: [...secret.headers] } : {}),
    };
  }
  return out;
}

/**
 * The placeholder the guest sees for one secret: read now from `placeholderFrom` (a file whoever
 * declared the secret keeps shaped like the credential, e.g. a JWT with the real claims and a random
 * signature), else derived from the salt (`placeholderFor`). CONTROLLER_SECRET_UNAVAILABLE when the
 * file is missing or its text is not a placeholder; the message never quotes it.
 */
export async function secretPlaceholder(
  name: string,
  secret: SecretConfig,
  options: SecretResolution,
): Promise<string> {
  if (secret.placeholderFrom === undefined) return placeholderFor(options.salt, name, secret.placeholderPrefix);
  const source = parseSecretSource(secret.placeholderFrom);
  const home = options.home ?? hostHome();
  const file = source.kind === "file" ? expandHome(source.path, home) : "";
  // The file's text goes into the guest: a repository's config must not name the user's keys.
  const real = await realpath(file).catch(() => file);
  const place = protectedPlace(real, await hostPlaces(options.stateRoot, { HOME: home }));
  if (place) {
    throw new ControllerError(
      "CONTROLLER_HOST_PATH_REFUSED",
      `the placeholder of secret ${name} (from ${escapeControlChars(secret.placeholderFrom)}) would put ${escapeControlChars(real)} into the guest, which ${escapeControlChars(place.why)}`,
      {
        hint: "A placeholder file holds a made-up value shaped like the credential; keep it in the project (e.g. ./placeholders/token), never in a place that holds real credentials.",
        details: { secret: name, path: real, place: place.place },
      },
    );
  }
  const fail = (what: string): never => {
    throw new ControllerError(
      "CONTROLLER_SECRET_UNAVAILABLE",
      `the placeholder of secret ${name} (from ${secret.placeholderFrom}): ${what}`,
      {
        hint: `Write the guest's placeholder to ${file} (one line of visible ASCII, 24 to 4096 characters), then start again.`,
        details: { secret: name, placeholderFrom: secret.placeholderFrom },
      },
    );
  };
  const text = await readSecretFile(file, fail);
  if (!SHAPED_PLACEHOLDER_PATTERN.test(text)) fail("it is not one line of 24 to 4096 visible ASCII characters");
  return text;
}

/** The value of one secret, read now from its source. */
export async function readSecretValue(name: string, secret: SecretConfig, options: SecretResolution): Promise<string> {
  const source = parseSecretSource(secret.from);
  const fail = (what: string, hint: string): never => {
    throw new ControllerError("CONTROLLER_SECRET_UNAVAILABLE", `secret ${name} (from ${secret.from}): ${what}`, {
      hint,
      details: { secret: name, from: secret.from },
    });
  };
  let value: string;
  if (source.kind === "env") {
    const env = options.env ?? process.env;
    const found = env[source.name];
    if (found === undefined || found === "") {
      fail(
        `the host environment variable ${source.name} is not set`,
        `Set ${source.name} in the environment that runs start (the CLI or Pi that starts the instance), then start it again.`,
      );
    }
    value = found!;
  } else {
    const file = expandHome(source.path, options.home ?? hostHome());
    value = await readSecretFile(file, (what) =>
      fail(what, `Put the credential in ${file} (one line; a final line break is dropped), then start again.`),
    );
  }
  if (/[\r\n\0]/.test(value))
    fail("the value holds a line break or NUL, which no HTTP header can carry", "Store one line.");
  return value;
}

async function readSecretFile(file: string, fail: (what: string) => never): Promise<string> {
  let info;
  try {
    info = await stat(file);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return fail(code === "ENOENT" ? `${file} does not exist` : `${file} cannot be read (${code})`);
  }
  // Not a FIFO or a device: reading those could block the start or never end.
  if (!info.isFile()) return fail(`${file} is not a regular file`);
  if (info.size > LIMITS.secretValueMaxBytes) {
    return fail(`${file} holds ${info.size} bytes, more than the ${LIMITS.secretValueMaxBytes} a secret may have`);
  }
  let text: string;
  try {
    const handle = await open(file, "r");
    try {
      const buffer = Buffer.alloc(LIMITS.secretValueMaxBytes + 1);
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
      if (bytesRead > LIMITS.secretValueMaxBytes) return fail(`${file} grew past ${LIMITS.secretValueMaxBytes} bytes`);
      text = buffer.subarray(0, bytesRead).toString("utf8");
    } finally {
      await handle.close();
    }
  } catch (error) {
    if (error instanceof ControllerError) throw error;
    return fail(`${file} cannot be read (${(error as NodeJS.ErrnoException).code ?? "error"})`);
  }
  const value = text.replace(/\r?\n$/, "");
  if (value === "") return fail(`${file} is empty`);
  return value;
}

/**
 * The config's mounts with host paths resolved (`~/`, symlinks). Refuses, with
 * CONTROLLER_MOUNT_REFUSED, a host directory that is missing or not a directory, and one that is,
 * is in or holds a protected place (host-places.ts: `/`, the home directory, its dot-files and
 * dot-directories, the system's live directories, the temporary directory, the state directory).
 * For every caller: a repository's sandbox.yaml may ask for any of these.
 */
export async function resolveMounts(
  config: SandboxConfig,
  options: { stateRoot: string; home?: string },
): Promise<VmMount[]> {
  const home = options.home ?? hostHome();
  const places = await hostPlaces(options.stateRoot, { HOME: home });
  const mounts: VmMount[] = [];
  // A record written before mounts existed has none.
  for (const mount of config.mounts ?? []) {
    const hostPath = expandHome(mount.host, home);
    const refuse = (why: string, hint: string): never => {
      throw new ControllerError("CONTROLLER_MOUNT_REFUSED", `mount ${mount.host} → ${mount.guest}: ${why}`, {
        hint,
        details: { host: mount.host, guest: mount.guest, hostPath },
      });
    };
    let real: string;
    try {
      real = await realpath(hostPath);
      if (!(await stat(real)).isDirectory()) refuse(`${hostPath} is not a directory`, "Mount a directory.");
    } catch (error) {
      if (error instanceof ControllerError) throw error;
      const code = (error as NodeJS.ErrnoException).code;
      return refuse(
        code === "ENOENT" ? `${hostPath} does not exist` : `${hostPath} cannot be read (${code})`,
        "Create the directory, or fix mounts in the sandbox.yaml and create the instance again.",
      );
    }
    const place = protectedPlace(real, places);
    if (place) {
      refuse(
        `${real} ${place.why}; it is never mounted`,
        "Mount a narrower directory (a project's docs, not the whole home); for credentials use network.secrets.",
      );
    }
    mounts.push({ hostPath: real, guestPath: mount.guest });
  }
  return mounts;
}

/**
 * Refuses, for every caller, a config whose marked keys of a `neverProtected` kind (a mount, a host
 * file read into the guest) name a protected place. Derived from the marks, so a new key of such a
 * kind is covered without a line here; mounts and placeholder files get their own, more specific
 * refusals first (resolveMounts, secretPlaceholder).
 */
export async function refuseProtectedReaches(
  config: SandboxConfig,
  stateRoot: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<void> {
  const places = await hostPlaces(stateRoot, env);
  for (const reach of await resolveReaches(config, env)) {
    const path = reachPath(reach);
    if (path === undefined || !HOST_REACH_KINDS[reach.kind].neverProtected) continue;
    const place = protectedPlace(path, places);
    if (!place) continue;
    const key = reach.key.join(".");
    throw new ControllerError(
      "CONTROLLER_HOST_PATH_REFUSED",
      `${key} names ${escapeControlChars(path)}, which ${escapeControlChars(place.why)}; its content would reach the guest`,
      {
        hint: `Name a file or directory of the project in ${key}; credentials go in network.secrets.`,
        details: { key, path, place: place.place },
      },
    );
  }
}

/** What `~/` means: `$HOME` as a shell reads it, else the account's home directory. */
function hostHome(): string {
  return process.env.HOME || homedir();
}

/** The guest file that gives terminal (ssh) sessions the placeholders: ssh resets the environment. */
export const GUEST_SECRETS_PROFILE = "/etc/profile.d/pi-sandbox-secrets.sh";

/**
 * The text of {@link GUEST_SECRETS_PROFILE}: one `export NAME='placeholder'` per secret (a
 * `placeholderFrom` file read now; one that cannot be read, or holds a quote, is left out).
 */
export async function secretsProfile(config: SandboxConfig, salt: string, stateRoot: string): Promise<string> {
  const lines = ["# Written by pi-sandbox: placeholders of network.secrets (the values stay on the host)."];
  for (const [name, secret] of Object.entries(config.network.secrets ?? {})) {
    const placeholder = await secretPlaceholder(name, secret, { salt, stateRoot }).catch(() => undefined);
    if (placeholder !== undefined && !placeholder.includes("'")) lines.push(`export ${name}='${placeholder}'`);
  }
  return lines.join("\n") + "\n";
}
