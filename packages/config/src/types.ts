// The typed config that parsing returns: services, previews, network, secrets, mounts, resources.
import { LIMITS } from "./limits.js";
import type { ProfileName, Resources } from "./profiles.js";

/** Guest operating systems a service may be limited to. */
export type Platform = "linux" | "darwin";

/** How readiness of a service is decided. */
export type HealthCheck =
  /** The service's port accepts a TCP connection (the default). */
  | { kind: "tcp" }
  /** An HTTP GET of `path` answers 2xx or 3xx once the port is open. */
  | { kind: "http"; path: string }
  /** Only that the service's process is running (for daemons without a TCP port). */
  | { kind: "process" };

/** A link into a service's preview. */
export interface PreviewLink {
  /** An app path (`/docs`) or an absolute http(s) URL. */
  url: string;
  /** Link title. */
  title: string;
  /** Optional longer text. */
  description?: string;
}

/** An entry of `previews`: a single link or a one-level folder of links. */
export type PreviewEntry =
  | ({ kind: "link" } & PreviewLink)
  | {
      kind: "folder";
      /** Folder name, unique within the service. */
      folder: string;
      /** Links in the folder. */
      links: PreviewLink[];
    };

/** One declared service, with every default applied. */
export interface ServiceConfig {
  /** The service's name (its key under `services`). */
  name: string;
  /** Foreground guest login-shell command, trimmed. */
  command: string;
  /** Working directory relative to the workspace, normalised; "." is the workspace root. */
  cwd: string;
  /** Fixed guest port; undefined means a free port is allocated once and kept. */
  port?: number;
  /** Extra environment, with `${services.NAME.publicURL}` placeholders left unresolved. */
  env: Record<string, string>;
  /** Readiness check. */
  health: HealthCheck;
  /** Readiness deadline in ms. */
  timeoutMs: number;
  /** The main preview link, when `preview` is set. */
  preview?: PreviewLink;
  /** Extra preview links and folders, as declared. */
  previews: PreviewEntry[];
  /** Platforms the service runs on; the guest is always Linux. */
  platforms: Platform[];
}

/**
 * The one name under which the guest reaches the host's services (`network.hostPorts`), like
 * Docker's `host.docker.internal`: `host.sandbox.internal:<port>` leads to the host's
 * `127.0.0.1:<port>` for the listed ports only.
 */
export const HOST_SERVICES_HOSTNAME = "host.sandbox.internal";

/** Outbound network policy. */
export interface NetworkConfig {
  /** Hosts reachable over HTTP(S), lowercased; `*.` entries match subdomains. Empty blocks all. */
  allowedHosts: string[];
  /**
   * Host loopback ports the guest may reach over TCP as `host.sandbox.internal:<port>` (each to the
   * host's `127.0.0.1:<port>`), in the order written; unique, at most `LIMITS.hostPortsMax`. Empty
   * reaches none.
   */
  hostPorts: number[];
  /**
   * Credentials kept on the host, by guest environment variable name, in the order written. The
   * guest sees a placeholder; the host substitutes the value read from `from` in requests to
   * `hosts` only. Empty: none.
   */
  secrets: Record<string, SecretConfig>;
}

/** One `network.secrets` entry: where the host reads the value, and where it may be sent. */
export interface SecretConfig {
  /**
   * `env:NAME` (the host environment at start) or `file:PATH`. A relative file path is made
   * absolute against the YAML file's directory; a leading `~/` is kept and means the home
   * directory of the host user at start. Never a value.
   */
  from: string;
  /**
   * Where the value goes, lowercased: host patterns whose HTTP(S) requests get it (each covered by
   * `allowedHosts`), and `host.sandbox.internal` (HTTP requests to every `hostPorts` port) or
   * `host.sandbox.internal:<port>` (to that listed port only); see `secretHostPorts`.
   */
  hosts: string[];
  /**
   * Header names (lowercased, no duplicates) the value may go into besides `authorization`,
   * `x-api-key` and `proxy-authorization`, e.g. `x-goog-api-key`. Absent: none.
   */
  headers?: string[];
  /**
   * Text the guest's placeholder starts with (1-32 of `A-Za-z0-9._-`), for a client that tells
   * credentials apart by their start (an Anthropic OAuth token contains `sk-ant-oat`). Not secret.
   */
  placeholderPrefix?: string;
  /**
   * `file:PATH` (made absolute like `from`): a host file holding the guest's placeholder, read
   * with the value at each start and each `secrets` reload, for a client that parses its
   * credential (a JWT's claims) so the placeholder must have its shape. Replaces the derived
   * placeholder (and `placeholderPrefix`). Not secret.
   */
  placeholderFrom?: string;
}

/** A host directory shared read-only with the guest. */
export interface MountConfig {
  /** Absolute host path, or `~/…` (the host user's home at start). */
  host: string;
  /** Absolute, normalised guest path. */
  guest: string;
}

/** `idle`: the instance suspends itself after this long unused. */
export interface IdleConfig {
  /** Time without a preview request, action, terminal, running command or guest CPU use, in ms. */
  suspendAfterMs: number;
}

/** `checkpoint`: automatic disk checkpoints while the instance runs. */
export interface CheckpointConfig {
  /**
   * Guest activity between two checkpoints, in ms; null when `off` (checkpoints only at stop and
   * suspend). A record written before this key existed has no `checkpoint`: read it as the default.
   */
  everyMs: number | null;
  /** `checkpoint.keep` when written: the most kept checkpoints (default {@link CONFIG_DEFAULTS.checkpointKeep}). */
  keep?: number;
  /** `checkpoint.keepGiB` when written: the most host GiB kept checkpoints hold (default {@link CONFIG_DEFAULTS.checkpointKeepGiB}). */
  keepGiB?: number;
}

/** `ledger`: what becomes of the instance's ledger. */
export interface LedgerConfig {
  /** Days a destroyed instance's ledger is kept; null: forever; 0: not kept (`off`). */
  keepDestroyedDays: number | null;
}

/** A validated sandbox.yaml with every default applied. Plain data: safe to serialise. */
export interface SandboxConfig {
  /** Schema version; always 1. */
  version: 1;
  /** Resource preset the resources were taken from. */
  profile: ProfileName;
  /** CPUs and memory: the profile's preset with any `resources` override applied. */
  resources: Resources;
  /** Sparse disk capacity in GiB. */
  diskGiB: number;
  /** Absolute guest path of the workspace, normalised. */
  workspace: string;
  /**
   * A built image's name as written (`default`; the controller finds it in the image cache), or the
   * absolute host path of a Gondolin assets directory; undefined means Gondolin's default.
   */
  image?: string;
  /** Commands run once when a disk is created or prepared. */
  setup: string[];
  /** Commands run at every start. */
  resume: string[];
  /** Outbound network policy. */
  network: NetworkConfig;
  /** Host directories shared read-only with the guest, in the order written. */
  mounts: MountConfig[];
  /** Auto-suspend while unused; absent (the default) keeps the instance running. */
  idle?: IdleConfig;
  /** Automatic disk checkpoints while it runs (default every 5 min of activity). */
  checkpoint: CheckpointConfig;
  /** `ledger` when written; absent: a destroyed instance's ledger is kept forever. */
  ledger?: LedgerConfig;
  /** Declared services by name, in declaration order. */
  services: Record<string, ServiceConfig>;
  /** Names of the services that run on the guest, in the order to start them. */
  serviceOrder: string[];
}

/** Defaults applied when a key is omitted. */
export const CONFIG_DEFAULTS = Object.freeze({
  /** Default profile. */
  profile: "small" as ProfileName,
  /** Default disk capacity in GiB. */
  diskGiB: 60,
  /** Default workspace path. */
  workspace: "/workspace",
  /** Default service working directory (the workspace root). */
  cwd: ".",
  /** Default readiness deadline in ms. */
  timeoutMs: LIMITS.readinessDefaultMs,
  /** Default platforms of a service. */
  platforms: Object.freeze(["linux", "darwin"] as Platform[]),
  /** Default `network.hostPorts`: no host service is reachable. */
  hostPorts: Object.freeze([] as number[]),
  /** Default `checkpoint.every`, in ms (5 min of guest activity). */
  checkpointEveryMs: 5 * 60 * 1000,
  /** Default `checkpoint.keep`: kept checkpoints per instance. */
  checkpointKeep: 30,
  /** Default `checkpoint.keepGiB`: host GiB the kept checkpoints of one instance may hold. */
  checkpointKeepGiB: 20,
});

/** True when the service gets a preview origin (and so `PUBLIC_URL`). */
export function hasPreview(service: Pick<ServiceConfig, "preview" | "previews">): boolean {
  return service.preview !== undefined || service.previews.length > 0;
}
