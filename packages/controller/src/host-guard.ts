// What a model may do to host paths without the user's say-so: read and write inside its project
// directory (Pi's cwd), except writes that would run code or change trust. Shared by the client,
// which asks the user, and the daemon, which checks a download's plan (known only once the
// guest's files are listed). The CLI and libraries (caller "user") send no guard.

import { createHash } from "node:crypto";
import { escapeControlChars, isPathWithin } from "@pi-sandbox/config";
import * as v from "valibot";
import { ControllerError } from "./errors.js";
import { foldedParts, protectedPlace, type HostPlaces } from "./host-places.js";

/** The limits a client puts on one call made for a model (sent beside the action). */
export interface HostGuard {
  /** Real path of the project directory; host paths outside it need the user's yes. */
  project: string;
  /** Pi runs in `/`, the home directory or a directory holding it: no host path is the project's. */
  noProject?: boolean;
  /** Every host path needs the user's yes (Pi is attached to an instance). */
  strict?: boolean;
  /** {@link concernsDigest} of the concerns the user allowed for this call. */
  approved?: string;
  /** sha256 of the sandbox.yaml text the client checked: the daemon refuses a file that changed since. */
  configSha256?: string;
}

/**
 * Why a call needs the user's yes, most severe first (the order prompts list them in). `severe`
 * concerns are listed one by one in every prompt and error; the others may be summarised.
 */
export const CONCERN_KINDS = Object.freeze({
  /** written in the home's credentials and configuration, the system's directories or the state directory */
  "protected-place": { why: "where credentials, configuration or pi-sandbox's state live", severe: true },
  /** written where code runs or trust is decided (see {@link runsCode}) */
  "runs-code": { why: "where code runs or trust is decided", severe: true },
  /** written with an exec bit */
  executable: { why: "executable", severe: true },
  /** read or written outside the project directory */
  "outside-project": { why: "outside the project directory", severe: true },
  /** any host path while Pi runs in `/`, the home directory or above it */
  "no-project": { why: "Pi runs in the home directory or above it, so nothing there is a project", severe: true },
  /** a sandbox.yaml whose reach on the host (secrets, mounts, host ports, host files) the user has not trusted */
  "untrusted-config": { why: "reaches the host", severe: true },
  /** an action that cannot be undone */
  irreversible: { why: "cannot be undone", severe: true },
  /** any host path while Pi is attached to an instance */
  attached: { why: "host path while Pi is attached to an instance", severe: false },
} as const);

/** Why a host path needs the user's yes. */
export type ConcernKind = keyof typeof CONCERN_KINDS;

const CONCERN_ORDER = Object.keys(CONCERN_KINDS) as ConcernKind[];

/** One thing the user must allow. */
export interface HostConcern {
  kind: ConcernKind;
  /** The resolved host path (for `untrusted-config`, the config's; for `irreversible`, the entry). */
  path: string;
  /** What a config reaches on the host, for `untrusted-config`; why a place is protected, for `protected-place`. */
  declares?: string[];
}

/**
 * Names that run code or decide trust when written: directories anywhere under the project
 * (everything in them), and files anywhere. Compared case-folded and NFC-normalised
 * ({@link foldName}), as case-insensitive file systems (macOS, Windows) open them.
 */
const CODE_DIRS = new Set([".git", ".pi", ".vscode", ".idea", ".github", ".husky", "node_modules"]);
const CODE_FILES = new Set([
  ".envrc",
  ".npmrc",
  ".cursorrules",
  "package.json",
  "makefile",
  "gnumakefile",
  "justfile",
  "pyproject.toml",
  "setup.py",
  "setup.cfg",
  "conftest.py",
  "cargo.toml",
  "build.rs",
  "go.mod",
  "agents.md",
  "claude.md",
]);

/** True when writing `path` (inside `project`) could run code or change trust. */
export function runsCode(project: string, path: string): boolean {
  const parts = foldedParts(project, path);
  if (parts.length === 0) return false;
  // A dot-file or dot-directory at the project's root: shell, editor, tool and CI configuration.
  if (parts[0]!.startsWith(".")) return true;
  return parts.some((part, i) => CODE_DIRS.has(part) || (i === parts.length - 1 && CODE_FILES.has(part)));
}

/**
 * The concern of reading host path `path` (real), if any; a protected place ({@link
 * protectedPlace}) is refused to a model whatever the user would answer, with
 * CONTROLLER_HOST_PATH_REFUSED.
 */
export function readConcern(guard: HostGuard, path: string, places: HostPlaces): HostConcern | undefined {
  const place = protectedPlace(path, places);
  if (place) {
    throw new ControllerError(
      "CONTROLLER_HOST_PATH_REFUSED",
      `the model may not read ${escapeControlChars(path)}: it ${escapeControlChars(place.why)}`,
      {
        hint: "This is refused to the model whatever the user answers. If the user wants it in the sandbox, they run the pi-sandbox command themselves.",
        details: { path, place: place.place },
      },
    );
  }
  if (guard.noProject) return { kind: "no-project", path };
  if (!isPathWithin(path, guard.project)) return { kind: "outside-project", path };
  return guard.strict ? { kind: "attached", path } : undefined;
}

/**
 * The concern of writing host path `path` (real, or below a real directory): a file's `mode` is
 * checked for exec bits; a directory passes `undefined`.
 */
export function writeConcern(
  guard: HostGuard,
  path: string,
  places: HostPlaces,
  mode?: number,
): HostConcern | undefined {
  const place = protectedPlace(path, places);
  if (place) return { kind: "protected-place", path, declares: [place.why] };
  if (guard.noProject) return { kind: "no-project", path };
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

/** At most this many harmless concerns are listed one by one; severe ones always are. */
export const CONCERNS_LISTED = 20;

/** The concerns most severe first, in their given order within a kind. */
export function bySeverity(concerns: readonly HostConcern[]): HostConcern[] {
  return [...concerns].sort((a, b) => CONCERN_ORDER.indexOf(a.kind) - CONCERN_ORDER.indexOf(b.kind));
}

/**
 * The severe concerns, each, with the paths below a directory of the same kind folded into it
 * ("dir (…) and 12 entries in it"), so a download of a whole tree into node_modules/ stays
 * readable without hiding a single place it writes.
 */
function folded(concerns: readonly HostConcern[]): { concern: HostConcern; inside: number }[] {
  const out: { concern: HostConcern; inside: number }[] = [];
  for (const concern of concerns) {
    const holder = out.find(
      (o) => o.concern.kind === concern.kind && concern.path.startsWith(`${o.concern.path.replace(/\/$/, "")}/`),
    );
    if (holder) holder.inside += 1;
    else out.push({ concern, inside: 0 });
  }
  return out;
}

/**
 * One printable line per concern, most severe first: every severe concern (paths inside a listed
 * directory of the same kind counted on its line), then the first {@link CONCERNS_LISTED} harmless
 * ones and how many more. Every path and declaration is escaped: they may come from the model or
 * the guest.
 */
export function describeConcerns(concerns: readonly HostConcern[]): string[] {
  const sorted = bySeverity(concerns);
  const line = (c: HostConcern, inside = 0) => {
    const declares = c.declares?.length ? `: ${c.declares.join("; ")}` : "";
    const more = inside > 0 ? `, and ${inside} more in it` : "";
    return escapeControlChars(`${c.path} (${CONCERN_KINDS[c.kind].why}${declares}${more})`);
  };
  const severe = sorted.filter((c) => CONCERN_KINDS[c.kind].severe);
  const harmless = sorted.filter((c) => !CONCERN_KINDS[c.kind].severe);
  const lines = folded(severe).map(({ concern, inside }) => line(concern, inside));
  lines.push(...harmless.slice(0, CONCERNS_LISTED).map((c) => line(c)));
  if (harmless.length > CONCERNS_LISTED) lines.push(`… and ${harmless.length - CONCERNS_LISTED} more host paths`);
  return lines;
}

/**
 * The error of a call that needs the user's yes: its details carry the concerns (every severe one,
 * the first {@link CONCERNS_LISTED} harmless ones), their count and their digest, which a call
 * allowed by the user sends back as `approved`.
 */
export function confirmationRequired(
  concerns: readonly HostConcern[],
  digest = concernsDigest(concerns),
): ControllerError {
  const sorted = bySeverity(concerns);
  const listed = [
    ...sorted.filter((c) => CONCERN_KINDS[c.kind].severe),
    ...sorted.filter((c) => !CONCERN_KINDS[c.kind].severe).slice(0, CONCERNS_LISTED),
  ];
  return new ControllerError(
    "CONTROLLER_CONFIRMATION_REQUIRED",
    `only the user can allow this; nothing was done:\n${describeConcerns(concerns).join("\n")}`,
    {
      hint: "Ask the user to allow it in Pi's prompt, or to run the equivalent pi-sandbox command themselves.",
      details: { concerns: listed, count: concerns.length, digest },
    },
  );
}

const guardSchema = v.strictObject({
  project: v.pipe(v.string(), v.startsWith("/")),
  noProject: v.optional(v.boolean()),
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
