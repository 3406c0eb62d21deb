// Short descriptions of parsed YAML values and paths for "got …" messages, escaped to one
// printable line.
import { escapeControlChars } from "./control-chars.js";

/**
 * A short, human description of a parsed YAML value for "got …" messages. Strings are quoted with
 * every control character escaped (JSON.stringify leaves DEL and C1 as they are), so a message
 * stays one printable line whatever the file holds.
 */
export function describeValue(value: unknown): string {
  if (value === null || value === undefined) return "an empty value";
  if (typeof value === "string")
    return escapeControlChars(JSON.stringify(value.length > 60 ? `${value.slice(0, 57)}...` : value));
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

/**
 * A dotted path from path segments: `services.web.previews.0.url`. A key that is empty or holds a
 * dot or whitespace is written as a JSON string (`services."a.b"`) so the path stays unambiguous.
 */
export function dottedPath(segments: readonly (string | number)[]): string {
  return segments
    .map((segment) =>
      typeof segment === "string" && (segment === "" || /[.\s"]/.test(segment))
        ? JSON.stringify(segment)
        : String(segment),
    )
    .join(".");
}

/** Wraps a path for a message: `services.web.port`. */
export function quotePath(path: string): string {
  // Keys may hold any character; control characters and line separators are escaped so each
  // issue stays on one printable line.
  const printable = escapeControlChars(path).replace(
    /[\u2028\u2029]/g,
    (char) => `\\u${char.charCodeAt(0).toString(16)}`,
  );
  return `\`${printable}\``;
}
