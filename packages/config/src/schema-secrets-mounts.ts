// The `network.secrets` and `mounts` parts of the sandbox.yaml schema (see schema.ts).
import * as v from "valibot";
import { SECRET_HOST_PATTERN } from "./host-services.js";
import { reaches, reachesNothing } from "./host-reach.js";
import { ENV_NAME_PATTERN, got, noControlChars } from "./schema-checks.js";

// `network.secrets`: credentials named by where the host reads them, never by value. No message
// here quotes what was written: a value pasted in by mistake must not reach an error or a log.
/** A secret's source: `env:NAME` (the host environment at start) or `file:PATH` (a host file). */
export const SECRET_SOURCE_PATTERN = /^(?:env:[A-Za-z_][A-Za-z0-9_]*|file:\S(?:.*\S)?)$/;

/** What a message says instead of a value written where a secret's reference belongs. */
export const INLINE_SECRET_HINT =
  "a credential is never written in sandbox.yaml (it would reach the guest, templates and logs); name where the host reads it at each start: `from: env:NAME` or `from: file:~/path`";

/** Environment names the guest needs for itself; a secret may not take them. */
export const RESERVED_SECRET_NAMES = Object.freeze(["PATH", "HOME", "PORT", "PUBLIC_URL", "SHELL", "USER", "TERM"]);

export const secretName = v.pipe(
  v.string(),
  v.regex(
    ENV_NAME_PATTERN,
    "is not a valid environment variable name; use letters, digits and underscores, not starting with a digit",
  ),
  v.check(
    (name: string) => !RESERVED_SECRET_NAMES.includes(name),
    `names a variable the guest needs for itself (${RESERVED_SECRET_NAMES.join(", ")}); pick another name`,
  ),
);

/** What a `placeholderPrefix` may hold: a few characters that are safe in any header. */
export const PLACEHOLDER_PREFIX_PATTERN = /^[A-Za-z0-9._-]{1,32}$/;
const PLACEHOLDER_PREFIX_RULE = "1 to 32 letters, digits, '.', '_' or '-'";

/** What a secret's `headers` entry may be: an HTTP header name (RFC 9110 token), up to 64 characters. */
export const SECRET_HEADER_PATTERN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$/;
/** Headers that frame a message rather than carry a credential: never a secret's. */
const STRUCTURAL_HEADERS = Object.freeze([
  "host",
  "content-length",
  "content-type",
  "content-encoding",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "upgrade",
  "te",
  "trailer",
  "expect",
]);
const SECRET_HEADER_RULE = `an HTTP header name (letters, digits, '-' and the like, at most 64) other than ${STRUCTURAL_HEADERS.join(", ")}`;

const PLACEHOLDER_FROM_RULE =
  "the file holds the guest's placeholder (one line of visible ASCII, 24 to 4096 characters), shaped like the credential by whoever writes it";

/** What a placeholder read from `placeholderFrom` may be: visible ASCII, no spaces, one line. */
export const SHAPED_PLACEHOLDER_PATTERN = /^[\x21-\x7e]{24,4096}$/;

export const secretSchema = v.strictObject({
  from: v.pipe(
    v.string(`must be a reference such as env:GITHUB_TOKEN or file:~/.config/gh/token; ${INLINE_SECRET_HINT}`),
    v.regex(
      SECRET_SOURCE_PATTERN,
      `must be a reference such as env:GITHUB_TOKEN or file:~/.config/gh/token; ${INLINE_SECRET_HINT}`,
    ),
    v.description(
      "Where the host reads the value at each start: env:NAME, or file:PATH (relative to this file, ~/ for home).",
    ),
    reaches("credential", "value from", "source"),
  ),
  hosts: v.pipe(
    v.array(
      v.pipe(
        v.string(got("must be a host name")),
        v.regex(
          SECRET_HOST_PATTERN,
          got(
            "must be a host name like api.github.com, a wildcard like *.example.com, or host.sandbox.internal[:<port>] for network.hostPorts",
          ),
        ),
      ),
      got("must be a list of host names"),
    ),
    v.minLength(1, "must list at least one host the value is sent to"),
    v.description(
      "Hosts whose requests get the real value; each must be covered by network.allowedHosts, except host.sandbox.internal (every network.hostPorts port) and host.sandbox.internal:<port> (that listed port).",
    ),
    reaches("credential", "sent to", "text"),
  ),
  headers: v.optional(
    v.pipe(
      v.array(
        v.pipe(
          v.string(got("must be an HTTP header name")),
          v.regex(SECRET_HEADER_PATTERN, got(`must be ${SECRET_HEADER_RULE}`)),
          v.check(
            (name: string) => !STRUCTURAL_HEADERS.includes(name.toLowerCase()),
            got(`must be ${SECRET_HEADER_RULE}`),
          ),
        ),
        got("must be a list of HTTP header names"),
      ),
      v.maxLength(8, "may list at most 8 header names"),
      v.description(
        "Header names the value may go into besides authorization, x-api-key and proxy-authorization (e.g. x-goog-api-key); any other header with the placeholder is refused.",
      ),
      reaches("credential", "also in headers", "text"),
    ),
  ),
  placeholderPrefix: v.optional(
    v.pipe(
      // Never quoted: a value pasted here by mistake must not reach a message.
      v.string(`must be ${PLACEHOLDER_PREFIX_RULE}`),
      v.regex(PLACEHOLDER_PREFIX_PATTERN, `must be ${PLACEHOLDER_PREFIX_RULE}`),
      v.description(
        "Text put before the guest's placeholder, for a client that recognises a credential by its start (e.g. sk-ant-oat01-). Not secret.",
      ),
      reachesNothing("text written into the guest's environment"),
    ),
  ),
  placeholderFrom: v.optional(
    v.pipe(
      v.string(`must be a reference such as file:~/.config/tool/placeholder; ${PLACEHOLDER_FROM_RULE}`),
      v.regex(
        /^file:\S(?:.*\S)?$/,
        `must be a reference such as file:~/.config/tool/placeholder; ${PLACEHOLDER_FROM_RULE}`,
      ),
      v.description(
        "A host file holding the placeholder the guest sees, read with the value (at each start and each `secrets`): for a client that parses its credential (a JWT), so the placeholder can carry the same shape. Not secret.",
      ),
      reaches("host-file-read", "guest's placeholder read from", "source"),
    ),
  ),
});

/** Guest paths a mount may not be at or under: the guest's own system and Gondolin's file system mount. */
export const RESERVED_MOUNT_PATHS = Object.freeze([
  "/bin",
  "/boot",
  "/data",
  "/dev",
  "/etc",
  "/lib",
  "/lib64",
  "/proc",
  "/run",
  "/sbin",
  "/sys",
  "/usr",
]);

/** True when `path` is `base` or lies under it (both absolute and normalised). */
export function isPathWithin(path: string, base: string): boolean {
  return base === "/" || path === base || path.startsWith(base + "/");
}

export const mountSchema = v.strictObject({
  host: v.pipe(
    v.string(got("must be a host directory")),
    v.regex(/\S/, "must not be empty; give a host directory (relative to this file, or ~/…)"),
    noControlChars,
    v.description("Host directory, relative to this file (or ~/…); shared read-only."),
    reaches("mount", "shares host directory", "path"),
  ),
  guest: v.pipe(
    v.string(got("must be an absolute guest path such as /mnt/docs")),
    v.regex(/^\/./, got("must be an absolute guest path such as /mnt/docs (not /)")),
    noControlChars,
    v.check((path: string) => !path.split("/").includes(".."), got("must not contain ..")),
    v.check(
      (path: string) => !RESERVED_MOUNT_PATHS.some((base) => isPathWithin(posixNormal(path), base)),
      got(
        `must not be at or under ${RESERVED_MOUNT_PATHS.join(", ")} (the guest's own system); use a path such as /mnt/docs`,
      ),
    ),
    v.description("Absolute guest path where the directory appears, read-only."),
    reachesNothing("a guest path"),
  ),
});

/** A guest path without repeated or trailing slashes. */
export function posixNormal(path: string): string {
  const normal = path.replace(/\/+/g, "/").replace(/\/\.(?=\/|$)/g, "");
  return normal.length > 1 ? normal.replace(/\/+$/, "") : normal;
}
