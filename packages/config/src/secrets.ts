// Reading `network.secrets` references and `mounts` host paths: what they name, not the values.
import { join } from "node:path";

/** Where a secret's value comes from, as named by its `from` reference. */
export type SecretSource =
  /** A variable of the host environment at start. */
  | { kind: "env"; name: string }
  /** A host file (absolute, or `~/…` for the home directory at start). */
  | { kind: "file"; path: string };

/** Splits a validated `from` reference (`env:NAME` or `file:PATH`). */
export function parseSecretSource(from: string): SecretSource {
  if (from.startsWith("env:")) return { kind: "env", name: from.slice("env:".length) };
  if (from.startsWith("file:")) return { kind: "file", path: from.slice("file:".length) };
  throw new TypeError(`not a secret reference: ${from.slice(0, 8)}…`);
}

/** A config host path with a leading `~` or `~/` made absolute under `home`. */
export function expandHome(path: string, home: string): string {
  if (path === "~") return home;
  if (path.startsWith("~/")) return join(home, path.slice(2));
  return path;
}
