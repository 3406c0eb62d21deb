// Renders a typed config back to sandbox.yaml text.
import { formatDuration } from "./duration.js";
import { PROFILES } from "./profiles.js";
import { CONFIG_DEFAULTS, type PreviewLink, type SandboxConfig, type ServiceConfig } from "./types.js";
import { yamlLib } from "./yaml-lib.js";

function link(value: PreviewLink): Record<string, string> {
  return {
    url: value.url,
    title: value.title,
    ...(value.description === undefined ? {} : { description: value.description }),
  };
}

function renderService(service: ServiceConfig): Record<string, unknown> {
  const out: Record<string, unknown> = { command: service.command };
  if (service.cwd !== CONFIG_DEFAULTS.cwd) out.cwd = service.cwd;
  if (service.port !== undefined) out.port = service.port;
  if (Object.keys(service.env).length > 0) out.env = { ...service.env };
  if (service.health.kind === "http") out.health = service.health.path;
  else if (service.health.kind === "process") out.health = "process";
  if (service.timeoutMs !== CONFIG_DEFAULTS.timeoutMs) out.timeoutMs = service.timeoutMs;
  if (service.preview) {
    const { url, title, description } = service.preview;
    out.preview = url === "/" && title === service.name && description === undefined ? true : link(service.preview);
  }
  if (service.previews.length > 0) {
    out.previews = service.previews.map((entry) =>
      entry.kind === "folder" ? { folder: entry.folder, links: entry.links.map(link) } : link(entry),
    );
  }
  if (service.platforms.length !== CONFIG_DEFAULTS.platforms.length) out.platforms = [...service.platforms];
  return out;
}

/**
 * Renders a config as canonical sandbox.yaml text that parses back to an equal config: keys in
 * reference order, defaults left out, `resources` only where they differ from the profile.
 * `image` is written as the absolute path the config holds.
 */
export function renderConfig(config: SandboxConfig): string {
  const out: Record<string, unknown> = { version: 1, profile: config.profile };
  const preset = PROFILES[config.profile];
  const resources: Record<string, number> = {};
  if (config.resources.cpus !== preset.cpus) resources.cpus = config.resources.cpus;
  if (config.resources.memoryGiB !== preset.memoryGiB) resources.memoryGiB = config.resources.memoryGiB;
  if (Object.keys(resources).length > 0) out.resources = resources;
  out.diskGiB = config.diskGiB;
  out.workspace = config.workspace;
  if (config.image !== undefined) out.image = config.image;
  if (config.setup.length > 0) out.setup = [...config.setup];
  if (config.resume.length > 0) out.resume = [...config.resume];
  const network: Record<string, unknown> = {};
  if (config.network.allowedHosts.length > 0) network.allowedHosts = [...config.network.allowedHosts];
  if (config.network.hostPorts.length > 0) network.hostPorts = [...config.network.hostPorts];
  if (Object.keys(config.network.secrets).length > 0) {
    network.secrets = Object.fromEntries(
      Object.entries(config.network.secrets).map(([name, secret]) => [
        name,
        {
          from: secret.from,
          hosts: [...secret.hosts],
          ...(secret.headers === undefined ? {} : { headers: [...secret.headers] }),
          ...(secret.placeholderPrefix === undefined ? {} : { placeholderPrefix: secret.placeholderPrefix }),
          ...(secret.placeholderFrom === undefined ? {} : { placeholderFrom: secret.placeholderFrom }),
        },
      ]),
    );
  }
  if (Object.keys(network).length > 0) out.network = network;
  if (config.mounts.length > 0) out.mounts = config.mounts.map((mount) => ({ host: mount.host, guest: mount.guest }));
  if (config.idle) out.idle = { suspendAfter: formatDuration(config.idle.suspendAfterMs) };
  // Absent in a record older than the key: the default, left out like every default.
  const checkpoint = config.checkpoint as SandboxConfig["checkpoint"] | undefined;
  const rendered: Record<string, unknown> = {};
  const every = checkpoint?.everyMs;
  if (every !== undefined && every !== CONFIG_DEFAULTS.checkpointEveryMs) {
    rendered.every = every === null ? "off" : formatDuration(every);
  }
  if (checkpoint?.keep !== undefined) rendered.keep = checkpoint.keep;
  if (checkpoint?.keepGiB !== undefined) rendered.keepGiB = checkpoint.keepGiB;
  if (Object.keys(rendered).length > 0) out.checkpoint = rendered;
  const keep = config.ledger?.keepDestroyedDays;
  if (keep !== undefined) out.ledger = { keepDestroyed: keep === null ? "forever" : keep === 0 ? "off" : keep };
  const services = Object.values(config.services);
  if (services.length > 0)
    out.services = Object.fromEntries(services.map((service) => [service.name, renderService(service)]));
  return yamlLib().stringify(out, { lineWidth: 0 });
}
