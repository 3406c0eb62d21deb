// `${services.NAME.publicURL}` placeholders: finding them, the services they name, and resolving
// them to preview origins.
import { ConfigError } from "./errors.js";

/** Matches every `${services.…}` placeholder; group 1 is the text between the braces after `services.`. */
const SERVICE_PLACEHOLDER = /\$\{services\.([^}]*)\}/g;

/** The only supported placeholder body: `NAME.publicURL`. */
const PUBLIC_URL_BODY = /^([^.]+)\.publicURL$/;

/** One `${services.…}` placeholder found in a string. */
export interface ServicePlaceholder {
  /** The placeholder as written, e.g. `${services.web.publicURL}`. */
  text: string;
  /** The referenced service, or undefined when the placeholder is not a `publicURL` reference. */
  service: string | undefined;
}

/** Every `${services.…}` placeholder in `value`, in order. */
export function findServicePlaceholders(value: string): ServicePlaceholder[] {
  const found: ServicePlaceholder[] = [];
  for (const match of value.matchAll(SERVICE_PLACEHOLDER)) {
    const body = PUBLIC_URL_BODY.exec(match[1] ?? "");
    found.push({ text: match[0], service: body?.[1] });
  }
  return found;
}

/** Names of the services whose public URL the env values refer to, each once, in first-use order. */
export function referencedServices(env: Readonly<Record<string, string>>): string[] {
  const names = new Set<string>();
  for (const value of Object.values(env)) {
    for (const placeholder of findServicePlaceholders(value)) if (placeholder.service) names.add(placeholder.service);
  }
  return [...names];
}

/**
 * Replaces every `${services.NAME.publicURL}` in the env values with `publicUrls[NAME]`; other text is
 * left as written. Throws `CONFIG_UNRESOLVED_REFERENCE` when a referenced service has no URL yet.
 */
export function resolvePublicUrlReferences(
  env: Readonly<Record<string, string>>,
  publicUrls: Readonly<Record<string, string>> | ReadonlyMap<string, string>,
): Record<string, string> {
  const lookup = (name: string): string | undefined =>
    publicUrls instanceof Map
      ? publicUrls.get(name)
      : Object.hasOwn(publicUrls, name)
        ? (publicUrls as Record<string, string>)[name]
        : undefined;
  const resolved: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    resolved[name] = value.replace(SERVICE_PLACEHOLDER, (text, body: string) => {
      const service = PUBLIC_URL_BODY.exec(body)?.[1];
      if (service === undefined) return text;
      const url = lookup(service);
      if (url === undefined) {
        throw new ConfigError(
          "CONFIG_UNRESOLVED_REFERENCE",
          `env ${name} refers to ${text}, but service ${service} has no preview URL yet`,
          { hint: `start ${service} with a preview first`, details: { env: name, service } },
        );
      }
      return url;
    });
  }
  return resolved;
}
