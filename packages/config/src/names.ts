// The name rules: instance, template, service and image names, with their checks.
import { ConfigError } from "./errors.js";

/** Instance and template names: a lowercase letter, then up to 39 lowercase letters, digits or hyphens. */
export const INSTANCE_NAME_PATTERN = /^[a-z][a-z0-9-]{0,39}$/;

/** Service names: a lowercase letter or digit, then up to 31 lowercase letters, digits or hyphens. */
export const SERVICE_NAME_PATTERN = /^[a-z0-9][a-z0-9-]{0,31}$/;

/** Image names (`image: dev`, `pi-sandbox image build dev`): the instance name rule. */
export const IMAGE_NAME_PATTERN = INSTANCE_NAME_PATTERN;

/**
 * True when an `image:` value is the name of a built image rather than a path: a bare word that
 * follows the name rule. A path contains `/` or starts with `.` or `~`.
 */
export function isImageName(value: string): boolean {
  return IMAGE_NAME_PATTERN.test(value);
}

/** True when `name` may name an instance or a template. */
export function isValidInstanceName(name: unknown): name is string {
  return typeof name === "string" && INSTANCE_NAME_PATTERN.test(name);
}

/** True when `name` may name a service. */
export function isValidServiceName(name: unknown): name is string {
  return typeof name === "string" && SERVICE_NAME_PATTERN.test(name);
}

/**
 * Throws `CONFIG_INVALID_NAME` unless `name` may name an instance or template; `kind` words the
 * message ("instance", "template").
 */
export function assertValidInstanceName(name: unknown, kind = "instance"): asserts name is string {
  if (isValidInstanceName(name)) return;
  const shown =
    typeof name === "string" ? JSON.stringify(name.length > 60 ? `${name.slice(0, 60)}…` : name) : String(name);
  throw new ConfigError("CONFIG_INVALID_NAME", `${shown} is not a valid ${kind} name`, {
    hint: `use 1–40 characters: a lowercase letter first, then lowercase letters, digits or hyphens (such as "demo" or "web-1")`,
    details: { name: typeof name === "string" ? name : String(name), kind },
  });
}
