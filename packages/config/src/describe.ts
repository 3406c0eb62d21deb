/** A short, human description of a parsed YAML value for "got …" messages. */
export function describeValue(value: unknown): string {
  if (value === null || value === undefined) return "an empty value";
  if (typeof value === "string") return JSON.stringify(value.length > 60 ? `${value.slice(0, 57)}...` : value);
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint") return String(value);
  if (Array.isArray(value)) return "a list";
  if (value instanceof Uint8Array) return "binary data";
  if (typeof value === "object") return "a mapping";
  return typeof value;
}

/** True for a mapping parsed from YAML (not a list, not binary data). */
export function isPlainRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
}

/** A dotted path from path segments: `services.web.previews.0.url`. */
export function dottedPath(segments: readonly (string | number)[]): string {
  return segments.map(String).join(".");
}

/** Wraps a path for a message: `services.web.port`. */
export function quotePath(path: string): string {
  return `\`${path}\``;
}
