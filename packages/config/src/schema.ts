// The structural schema of sandbox.yaml, written once and used twice: `parseConfig` validates
// with it and `sandboxJsonSchema` converts it for editors. Messages are the tail of a sentence
// whose subject is the offending path ("`services.web.port` must be between 1 and 65535; got 0").
// Rules that involve more than one field (port uniqueness, references, folders) live in rules.ts.
import * as v from "valibot";
import { LIMITS } from "./limits.js";
import { SERVICE_NAME_PATTERN } from "./names.js";
import { PROFILE_NAMES } from "./profiles.js";
import {
  ENV_NAME_PATTERN,
  HOST_PATTERN,
  PREVIEW_URL_PATTERN,
  got,
  noAmpEmail,
  noControlChars,
  noControlCharsButLines,
} from "./schema-checks.js";
import { markedKeys, marksOf, reaches, reachesNothing, type ConfigReach, type HostReachKind } from "./host-reach.js";
import type { SandboxConfig } from "./types.js";
import { checkpointSchema } from "./schema-checkpoint.js";
import { idleSchema } from "./schema-idle.js";
import { ledgerSchema } from "./schema-ledger.js";
import { mountSchema, secretName, secretSchema } from "./schema-secrets-mounts.js";

export { AMP_EMAIL_PLACEHOLDER, ENV_NAME_PATTERN, HOST_PATTERN, PREVIEW_URL_PATTERN } from "./schema-checks.js";
export {
  INLINE_SECRET_HINT,
  PLACEHOLDER_PREFIX_PATTERN,
  RESERVED_MOUNT_PATHS,
  RESERVED_SECRET_NAMES,
  SECRET_SOURCE_PATTERN,
  SHAPED_PLACEHOLDER_PATTERN,
  isPathWithin,
  posixNormal,
} from "./schema-secrets-mounts.js";

const shellCommand = v.pipe(
  v.string(got("must be a shell command (a string)")),
  v.description("A guest login-shell command."),
);

const previewUrl = v.pipe(
  v.string(got("must be a string")),
  noControlChars,
  v.regex(PREVIEW_URL_PATTERN, got("must be an app path starting with / (like /docs) or an absolute http(s):// URL")),
  noAmpEmail,
  v.description("An app path such as /docs, or an absolute http:// or https:// URL."),
  reachesNothing("a path of the guest's app, or a URL opened in the user's browser"),
);

const previewTitle = v.pipe(
  v.string(got("must be a string")),
  noControlChars,
  v.regex(/\S/, "must not be empty"),
  noAmpEmail,
  v.description("The link's title, one line."),
);

const previewDescription = v.pipe(
  v.string(got("must be a string")),
  noControlCharsButLines,
  noAmpEmail,
  v.description("What the link shows; may span lines."),
);

/** One preview link: `{url, title, description?}`. */
export const previewLinkSchema = v.strictObject({
  url: previewUrl,
  title: previewTitle,
  description: v.optional(previewDescription),
});

/** A one-level group of links: `{folder, links}`. */
export const previewFolderSchema = v.strictObject({
  folder: v.pipe(
    v.string(got("must be a string")),
    noControlChars,
    v.regex(/\S/, "must not be empty"),
    noAmpEmail,
    v.description("The folder's name, one line."),
  ),
  links: v.pipe(
    v.array(previewLinkSchema, got("must be a list of links {url, title, description?}")),
    v.minLength(1, "must list at least one link"),
    v.description("The links in this folder (one level: no folders inside)."),
  ),
});

/** An entry of `previews`: a link or a folder of links. */
export const previewEntrySchema = v.union(
  [previewLinkSchema, previewFolderSchema],
  got("must be a link {url, title, description?} or a folder {folder, links}"),
);

/** The object form of `preview`. */
export const previewObjectSchema = v.strictObject({
  url: v.optional(previewUrl, "/"),
  title: v.optional(previewTitle),
  description: v.optional(previewDescription),
});

const previewSchema = v.pipe(
  v.union(
    [v.literal(true), previewObjectSchema],
    got("must be true or a mapping with optional url, title and description; omit it for no preview"),
  ),
  v.description("true links / titled with the service name; a mapping sets url, title and description."),
);

const envName = v.pipe(
  v.string(),
  v.regex(
    ENV_NAME_PATTERN,
    "is not a valid environment variable name; use letters, digits and underscores, not starting with a digit",
  ),
  v.check(
    (name: string) => name !== "PORT",
    "cannot be set here: pi-sandbox sets PORT to the service's port itself; remove it (use `port:` to fix the port)",
  ),
  v.check(
    (name: string) => name !== "PUBLIC_URL",
    "cannot be set here: pi-sandbox sets PUBLIC_URL to the service's preview address itself; remove it",
  ),
  v.check(
    (name: string) => name !== "AMP_THREAD_ID",
    "is an Amp thread variable that does not exist in a local sandbox; remove it",
  ),
);

const healthSchema = v.pipe(
  v.string(got('must be an HTTP path starting with / (like /health) or "process"; omit it for a TCP check')),
  v.regex(
    /^(?:process|\/\S*)$/,
    got('must be an HTTP path starting with / (like /health) or "process"; omit it for a TCP check'),
  ),
  v.description('Omit for a TCP check; "/path" for HTTP GET accepting 2xx/3xx; "process" for non-TCP daemons.'),
  reachesNothing("an HTTP path of the guest's service"),
);

const cwdSchema = v.pipe(
  v.string(got("must be a path relative to the workspace")),
  v.regex(/^(?!\/)/, got("must be relative to the workspace (like app or services/api), not an absolute path")),
  v.check((cwd: string) => !escapesWorkspace(cwd), got("must stay inside the workspace; it may not climb out with ..")),
  v.description("Working directory relative to the workspace; default the workspace root."),
  reachesNothing("a guest directory"),
);

/** True when a relative path climbs above its base with `..`. */
export function escapesWorkspace(relative: string): boolean {
  let depth = 0;
  for (const part of relative.split("/")) {
    if (part === "..") depth -= 1;
    else if (part !== "" && part !== ".") depth += 1;
    if (depth < 0) return true;
  }
  return false;
}

const PORT_TEXT = "must be between 1 and 65535";
const portSchema = v.pipe(
  v.number(got(`must be a whole number between 1 and 65535`)),
  v.integer(got(`must be a whole number between 1 and 65535`)),
  v.minValue(1, got(PORT_TEXT)),
  v.maxValue(65535, got(PORT_TEXT)),
  v.description("Fixed guest port; omit to get a free port that is kept across restarts."),
  reachesNothing("a guest port (its preview's host port is chosen by pi-sandbox)"),
);

const HOST_PORT_TEXT = "must be a whole number between 1 and 65535 (a TCP port on the host's 127.0.0.1)";
const hostPortSchema = v.pipe(
  v.number(got(HOST_PORT_TEXT)),
  v.integer(got(HOST_PORT_TEXT)),
  v.minValue(1, got(HOST_PORT_TEXT)),
  v.maxValue(65535, got(HOST_PORT_TEXT)),
);

const timeoutSchema = v.pipe(
  v.number(got("must be a whole number of milliseconds greater than 0")),
  v.integer(got("must be a whole number of milliseconds greater than 0")),
  v.minValue(1, got("must be a whole number of milliseconds greater than 0")),
  v.description("Readiness deadline in milliseconds."),
);

const platformsSchema = v.pipe(
  v.array(v.picklist(["linux", "darwin"], got('must be "linux" or "darwin"')), got("must be a list such as [linux]")),
  v.minLength(1, "must list at least one platform (linux or darwin); omit the key to run everywhere"),
  v.description("Guest platforms the service runs on; the guest is always Linux."),
);

/** One service under `services`. */
export const serviceSchema = v.strictObject({
  command: v.pipe(shellCommand, v.regex(/\S/, "must not be empty; give the foreground command that runs the service")),
  cwd: v.optional(cwdSchema),
  port: v.optional(portSchema),
  env: v.optional(
    v.pipe(
      v.record(
        envName,
        v.string(got('must be a string; quote numbers and booleans (like "8080")')),
        got("must be a mapping of NAME: value"),
      ),
      v.description("Extra environment; values may use ${services.NAME.publicURL}."),
    ),
  ),
  health: v.optional(healthSchema),
  timeoutMs: v.optional(timeoutSchema, LIMITS.readinessDefaultMs),
  preview: v.optional(previewSchema),
  previews: v.optional(
    v.pipe(
      v.array(previewEntrySchema, got("must be a list of links and folders")),
      v.description("Extra links: {url, title, description?} or {folder, links}."),
    ),
  ),
  platforms: v.optional(platformsSchema),
});

const positiveWhole = (what: string) =>
  v.pipe(
    v.number(got(`must be a whole number of ${what} greater than 0`)),
    v.integer(got(`must be a whole number of ${what} greater than 0`)),
    v.minValue(1, got(`must be a whole number of ${what} greater than 0`)),
  );

const commandList = v.array(shellCommand, got("must be a list of shell commands"));

/** The whole sandbox.yaml document. */
export const sandboxConfigSchema = v.pipe(
  v.strictObject({
    version: v.pipe(
      v.literal(1, got("must be 1, the only supported version")),
      v.description("Schema version; always 1."),
    ),
    profile: v.optional(
      v.pipe(
        v.picklist(PROFILE_NAMES, got(`must be one of ${PROFILE_NAMES.join(", ")}`)),
        v.description("Resource preset: tiny 1/2, small 2/4, medium 4/8, large 8/16, xlarge 16/32 (CPUs/GiB)."),
      ),
      "small",
    ),
    resources: v.optional(
      v.pipe(
        v.strictObject({
          cpus: v.optional(v.pipe(positiveWhole("CPUs"), v.description("Virtual CPUs."))),
          memoryGiB: v.optional(v.pipe(positiveWhole("GiB"), v.description("Guest memory in GiB."))),
        }),
        v.description("Overrides the profile's CPUs and/or memory; never silently reduced."),
      ),
    ),
    diskGiB: v.optional(
      v.pipe(
        v.number(got("must be a whole number of GiB, at least 2")),
        v.integer(got("must be a whole number of GiB, at least 2")),
        v.minValue(2, got("must be at least 2 GiB")),
        v.description("Sparse disk capacity in GiB."),
      ),
      60,
    ),
    workspace: v.optional(
      v.pipe(
        v.string(got("must be an absolute guest path such as /workspace")),
        v.regex(/^\//, got("must be an absolute guest path such as /workspace")),
        v.check((path: string) => !path.split("/").includes(".."), got("must not contain ..")),
        v.description("Absolute guest path of the workspace."),
        reachesNothing("a guest path"),
      ),
      "/workspace",
    ),
    image: v.optional(
      v.pipe(
        v.string(got("must be an image name or a path to a Gondolin assets directory")),
        // A name (names.ts' rule) or a path: one pattern, so the JSON Schema carries it too.
        v.regex(
          /^(?:[a-z][a-z0-9-]{0,39}$|[.~]|.*\/)/,
          "must be an image name (lowercase letters, digits and hyphens, such as default) or a path containing / or starting with . or ~ (./images/dev)",
        ),
        v.description(
          "A built image's name (`pi-sandbox image build NAME`; `pi-sandbox image list`), or a Gondolin assets directory: a path containing / or starting with . or ~, relative to this file.",
        ),
        reaches("boot-asset", "boots the image in", "path"),
      ),
    ),
    setup: v.optional(v.pipe(commandList, v.description("Run once at create/prepare."))),
    resume: v.optional(v.pipe(commandList, v.description("Run at every start."))),
    network: v.optional(
      v.pipe(
        v.strictObject({
          allowedHosts: v.optional(
            v.pipe(
              v.array(
                v.pipe(
                  v.string(got("must be a host name")),
                  v.regex(
                    HOST_PATTERN,
                    got("must be a host name like registry.npmjs.org or a wildcard like *.example.com"),
                  ),
                ),
                got("must be a list of host names"),
              ),
              v.description("Outbound HTTP(S) allow-list; empty blocks all outbound traffic."),
              reachesNothing("internet hosts, reached through the host's egress policy; never the host itself"),
            ),
          ),
          hostPorts: v.optional(
            v.pipe(
              v.array(hostPortSchema, got("must be a list of host port numbers such as [8000]")),
              v.maxLength(
                LIMITS.hostPortsMax,
                (issue) =>
                  `must list at most ${LIMITS.hostPortsMax} ports; got ${(issue.input as unknown[]).length}. List only the host services the guest needs`,
              ),
              v.description(
                "Host loopback ports the guest may reach over TCP as host.sandbox.internal:<port> (the host's 127.0.0.1:<port>); empty reaches none.",
              ),
              reaches("host-port", "opens to the guest the host's 127.0.0.1 ports", "port"),
            ),
          ),
          secrets: v.optional(
            v.pipe(
              v.record(secretName, secretSchema, "must be a mapping of NAME: {from, hosts}"),
              v.maxEntries(LIMITS.secretsMax, `must name at most ${LIMITS.secretsMax} secrets`),
              v.description(
                "Credentials kept on the host: the guest sees a placeholder in $NAME, and the host puts the value into requests to the listed hosts only.",
              ),
            ),
          ),
        }),
        v.description("What the guest may reach: nothing outside the VM unless listed here."),
      ),
    ),
    mounts: v.optional(
      v.pipe(
        v.array(mountSchema, "must be a list of {host, guest} mounts"),
        v.maxLength(
          LIMITS.mountsMax,
          (issue) => `must list at most ${LIMITS.mountsMax} mounts; got ${(issue.input as unknown[]).length}`,
        ),
        v.description("Host directories shared read-only with the guest."),
      ),
    ),
    idle: v.optional(idleSchema),
    checkpoint: v.optional(checkpointSchema),
    ledger: v.optional(ledgerSchema),
    services: v.optional(
      v.pipe(
        v.record(
          v.pipe(
            v.string(),
            v.regex(
              SERVICE_NAME_PATTERN,
              "is not a valid service name; use 1–32 lowercase letters, digits or hyphens, starting with a letter or digit",
            ),
          ),
          serviceSchema,
          got("must be a mapping of service names to services"),
        ),
        v.description("Supervised long-running processes by name: each gets $PORT and may be previewed."),
      ),
    ),
  }),
  v.title("sandbox.yaml"),
  v.description("A pi-sandbox environment: resources, setup hooks, network policy and services."),
);

/** The typed output of the structural schema. */
export type SandboxConfigInput = v.InferOutput<typeof sandboxConfigSchema>;

/**
 * Every value of a parsed config that reaches the host, as marked in the schema above, in schema
 * order. A `path` value that is a bare name (an image's) names an entry of pi-sandbox's own image
 * store, not a host path, and is left out.
 */
export function configReaches(config: SandboxConfig): ConfigReach[] {
  return marksOf(sandboxConfigSchema, config).filter(
    (reach) => reach.value !== "path" || (typeof reach.given === "string" && /^[/~]/.test(reach.given)),
  );
}

/** The keys of sandbox.yaml that reach the host, with their kinds, as marked in the schema above. */
export function configReachKeys(): { key: string; kind: HostReachKind }[] {
  return markedKeys(sandboxConfigSchema);
}
