// Turns a validated sandbox.yaml document into the typed config, with defaults and profiles
// applied.
import { homedir } from "node:os";
import { dirname, join, posix, resolve } from "node:path";
import { parseDuration } from "./duration.js";
import { isImageName } from "./names.js";
import { PROFILES } from "./profiles.js";
import { referencedServices } from "./references.js";
import { startOrder } from "./rules.js";
import { posixNormal, type SandboxConfigInput } from "./schema.js";
import {
  CONFIG_DEFAULTS,
  type HealthCheck,
  type Platform,
  type PreviewEntry,
  type PreviewLink,
  type SandboxConfig,
  type ServiceConfig,
} from "./types.js";

type ServiceInput = NonNullable<SandboxConfigInput["services"]>[string];
type LinkInput = { url: string; title: string; description?: string | undefined };

function link(input: LinkInput): PreviewLink {
  return {
    url: input.url,
    title: input.title,
    ...(input.description === undefined ? {} : { description: input.description }),
  };
}

function health(value: string | undefined): HealthCheck {
  if (value === undefined) return { kind: "tcp" };
  if (value === "process") return { kind: "process" };
  return { kind: "http", path: value };
}

/** A workspace-relative path in canonical form; "." for the workspace root. */
function normaliseCwd(cwd: string | undefined): string {
  if (cwd === undefined || cwd.trim() === "") return CONFIG_DEFAULTS.cwd;
  const normal = posix.normalize(cwd).replace(/\/+$/, "");
  return normal === "" ? CONFIG_DEFAULTS.cwd : normal;
}

function normaliseService(name: string, input: ServiceInput): ServiceConfig {
  const service: ServiceConfig = {
    name,
    command: input.command.trim(),
    cwd: normaliseCwd(input.cwd),
    env: { ...input.env },
    health: health(input.health),
    timeoutMs: input.timeoutMs,
    previews: (input.previews ?? []).map((entry): PreviewEntry =>
      "folder" in entry
        ? { kind: "folder", folder: entry.folder, links: entry.links.map(link) }
        : { kind: "link", ...link(entry) },
    ),
    platforms: CONFIG_DEFAULTS.platforms.filter((platform: Platform) =>
      (input.platforms ?? CONFIG_DEFAULTS.platforms).includes(platform),
    ),
  };
  if (input.port !== undefined) service.port = input.port;
  if (input.preview === true) service.preview = { url: "/", title: name };
  else if (input.preview !== undefined) {
    service.preview = link({
      url: input.preview.url,
      title: input.preview.title ?? name,
      description: input.preview.description,
    });
  }
  return service;
}

/** Applies every default to a structurally valid, rule-checked config. */
export function normaliseConfig(input: SandboxConfigInput, sourcePath: string | undefined): SandboxConfig {
  const services: Record<string, ServiceConfig> = {};
  for (const [name, service] of Object.entries(input.services ?? {})) services[name] = normaliseService(name, service);
  const dependencies = Object.fromEntries(
    Object.values(services).map((service) => [
      service.name,
      { platforms: service.platforms, dependsOn: referencedServices(service.env) },
    ]),
  );
  const workspace = posix.normalize(input.workspace);
  const config: SandboxConfig = {
    version: 1,
    profile: input.profile,
    resources: { ...PROFILES[input.profile], ...stripUndefined(input.resources ?? {}) },
    diskGiB: input.diskGiB,
    workspace: workspace.length > 1 ? workspace.replace(/\/+$/, "") : workspace,
    setup: [...(input.setup ?? [])],
    resume: [...(input.resume ?? [])],
    network: {
      allowedHosts: [...new Set((input.network?.allowedHosts ?? []).map((host) => host.toLowerCase()))],
      hostPorts: [...(input.network?.hostPorts ?? CONFIG_DEFAULTS.hostPorts)],
      secrets: Object.fromEntries(
        Object.entries(input.network?.secrets ?? {}).map(([name, secret]) => [
          name,
          {
            from: normaliseSource(secret.from, sourcePath),
            hosts: [...new Set(secret.hosts.map((h) => h.toLowerCase()))],
            ...(secret.headers === undefined
              ? {}
              : { headers: [...new Set(secret.headers.map((h) => h.toLowerCase()))] }),
            ...(secret.placeholderPrefix === undefined ? {} : { placeholderPrefix: secret.placeholderPrefix }),
            ...(secret.placeholderFrom === undefined
              ? {}
              : { placeholderFrom: normaliseSource(secret.placeholderFrom, sourcePath) }),
          },
        ]),
      ),
    },
    mounts: (input.mounts ?? []).map((mount) => ({
      host: hostPath(mount.host, sourcePath),
      guest: posixNormal(mount.guest),
    })),
    services,
    serviceOrder: startOrder(dependencies),
    checkpoint: {
      everyMs: checkpointEveryMs(input.checkpoint?.every),
      ...(input.checkpoint?.keep === undefined ? {} : { keep: input.checkpoint.keep }),
      ...(input.checkpoint?.keepGiB === undefined ? {} : { keepGiB: input.checkpoint.keepGiB }),
    },
  };
  if (input.image !== undefined) config.image = imageRef(input.image, sourcePath);
  if (input.idle !== undefined) config.idle = { suspendAfterMs: parseDuration(input.idle.suspendAfter) ?? 0 };
  const keep = input.ledger?.keepDestroyed;
  if (keep !== undefined) config.ledger = { keepDestroyedDays: keep === "forever" ? null : keep === "off" ? 0 : keep };
  return config;
}

/** `checkpoint.every` in ms: the default when absent, null for `off`. */
function checkpointEveryMs(every: string | undefined): number | null {
  if (every === undefined) return CONFIG_DEFAULTS.checkpointEveryMs;
  return every === "off" ? null : (parseDuration(every) ?? CONFIG_DEFAULTS.checkpointEveryMs);
}

/**
 * An `image:` value: a built image's name is kept as written (the controller looks it up in the
 * image cache); a path is made absolute, `~/…` from the home directory, anything else relative to
 * the YAML file's directory when we know it, else to the caller's working directory.
 */
function imageRef(value: string, sourcePath: string | undefined): string {
  if (isImageName(value)) return value;
  if (value === "~" || value.startsWith("~/")) return join(homedir(), value.slice(1));
  return sourcePath === undefined ? resolve(value) : resolve(dirname(resolve(sourcePath)), value);
}

/**
 * A host path as written: `~` and `~/…` are kept (the home of the host user at start), anything
 * else is made absolute against the YAML file's directory (else the working directory).
 */
function hostPath(path: string, sourcePath: string | undefined): string {
  if (path === "~" || path.startsWith("~/")) return path;
  return sourcePath === undefined ? resolve(path) : resolve(dirname(resolve(sourcePath)), path);
}

function normaliseSource(from: string, sourcePath: string | undefined): string {
  return from.startsWith("file:") ? `file:${hostPath(from.slice("file:".length), sourcePath)}` : from;
}

function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, item]) => item !== undefined)) as Partial<T>;
}
