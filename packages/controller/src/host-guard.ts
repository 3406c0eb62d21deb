// What a model may do to host paths without the user's say-so: read and write inside its project
// directory (Pi's cwd), except writes that would run code or change trust. Shared by the client,
// which asks the user, and the daemon, which checks a download's plan (known only once the
// guest's files are listed). The CLI and libraries (caller "user") send no guard.

import { createHash } from "node:crypto";
import { relative, sep } from "node:path";
import { isPathWithin } from "@pi-sandbox/config";
import * as v from "valibot";
import { ControllerError } from "./errors.js";

/** The limits a client puts on one call made for a model (sent beside the action). */
export interface HostGuard {
  /** Real path of the project directory; host paths outside it need the user's yes. */
  project: string;
  /** Every host path needs the user's yes (Pi is attached to an instance). */
  strict?: boolean;
  /** {@link concernsDigest} of the concerns the user allowed for this call. */
  approved?: string;
  /** sha256 of the sandbox.yaml text the client checked: the daemon refuses a file that changed since. */
  configSha256?: string;
}

/** Why a host path needs the user's yes. */
export type ConcernKind =
  /** read or written outside the project directory */
  | "outside-project"
  /** written where code runs or trust is decided: .git/, .pi/, .envrc, .vscode/, node_modules/.bin, a root dotfile */
  | "runs-code"
  /** written with an exec bit */
  | "executable"
  /** any host path while Pi is attached to an instance */
  | "attached"
  /** a sandbox.yaml whose secrets or mounts the user has not trusted */
  | "untrusted-config";

/** One thing the user must allow. */
export interface HostConcern {
  kind: ConcernKind;
  /** The resolved host path (for `untrusted-config`, the config's). */
  path: string;
  /** What a config declares (secret sources with their hosts, mounts), for `untrusted-config`. */
  declares?: string[];
}

/** Names that run code or decide trust when written anywhere under the project. */
const CODE_NAMES = new Set([".git", ".pi", ".envrc", ".vscode"]);

/** True when writing `path` (inside `project`) could run code or change trust. */
export function runsCode(project: string, path: string): boolean {
  const parts = relative(project, path).split(sep).filter(Boolean);
  if (parts.length === 0) return false;
  if (parts[0]!.startsWith(".")) return true;
  return parts.some((part, i) => CODE_NAMES.has(part) || (part === ".bin" && parts[i - 1] === "node_modules"));
}

/** The concern of reading host path `path` (real), if any. */
export function readConcern(guard: HostGuard, path: string): HostConcern | undefined {
  if (!isPathWithin(path, guard.project)) return { kind: "outside-project", path };
  return guard.strict ? { kind: "attached", path } : undefined;
}

/**
 * The concern of writing host path `path` (real, or below a real directory): a file's `mode` is
 * checked for exec bits; a directory passes `undefined`.
 */
export function writeConcern(guard: HostGuard, path: string, mode?: number): HostConcern | undefined {
  if (!isPathWithin(path, guard.project)) return { kind: "outside-project", path };
  if (runsCode(guard.project, path)) return { kind: "runs-code", path };
  if (mode !== undefined && (mode & 0o111) !== 0) return { kind: "executable", path };
  return guard.strict ? { kind: "attached", path } : undefined;
}

/** A digest naming exactly these concerns: what the user allows is what runs, nothing more. */
export function concernsDigest(concerns: readonly HostConcern[]): string {
  const lines = concerns.map((c) => JSON.stringify([c.kind, c.path, c.declares ?? []])).sort();
  return createHash("sha256").update(lines.join("\n")).digest("hex");
}

/** At most this many concerns are listed in an error or a prompt; the digest covers them all. */
export const CONCERNS_LISTED = 20;

const WHY: Record<ConcernKind, string> = {
  "outside-project": "outside the project directory",
  "runs-code": "where code runs or trust is decided",
  executable: "executable",
  attached: "host path while Pi is attached to an instance",
  "untrusted-config": "declares secrets or mounts",
};

/** One line per concern (the first {@link CONCERNS_LISTED}), then how many more. */
export function describeConcerns(concerns: readonly HostConcern[]): string[] {
  const lines = concerns.slice(0, CONCERNS_LISTED).map((c) => {
    const declares = c.declares?.length ? `: ${c.declares.join("; ")}` : "";
    return `${c.path} (${WHY[c.kind]}${declares})`;
  });
  if (concerns.length > CONCERNS_LISTED) lines.push(`… and ${concerns.length - CONCERNS_LISTED} more`);
  return lines;
}

/**
 * The error of a call that needs the user's yes: its details carry the concerns (the first
 * {@link CONCERNS_LISTED}), their count and their digest, which a call allowed by the user sends
 * back as `approved`.
 */
export function confirmationRequired(
  concerns: readonly HostConcern[],
  digest = concernsDigest(concerns),
): ControllerError {
  return new ControllerError(
    "CONTROLLER_CONFIRMATION_REQUIRED",
    `only the user can allow this; nothing was done:\n${describeConcerns(concerns).join("\n")}`,
    {
      hint: "Ask the user to allow it in Pi's prompt, or to run the equivalent pi-sandbox command themselves.",
      details: { concerns: concerns.slice(0, CONCERNS_LISTED), count: concerns.length, digest },
    },
  );
}

const guardSchema = v.strictObject({
  project: v.pipe(v.string(), v.startsWith("/")),
  strict: v.optional(v.boolean()),
  approved: v.optional(v.pipe(v.string(), v.regex(/^[0-9a-f]{64}$/))),
  configSha256: v.optional(v.pipe(v.string(), v.regex(/^[0-9a-f]{64}$/))),
});

/** A guard as received on the daemon's socket; a malformed one refuses the call (never ignored). */
export function parseHostGuard(value: unknown): HostGuard | undefined {
  if (value === undefined) return undefined;
  const parsed = v.safeParse(guardSchema, value);
  if (!parsed.success) throw new ControllerError("CONTROLLER_BAD_INPUT", "the call's host guard is malformed");
  return parsed.output;
}
