// Public API of @pi-sandbox/config: everything not listed here is private.

// Errors: the base every package's error class extends, and this package's own
export { CodedError, isCodedError, brandError, hasBrand, messageOf, defineCodedError } from "./coded-error.js";
export type { CodedErrorOptions, CodedErrorJson, CodedErrorKind } from "./coded-error.js";
export { ConfigError, isConfigError, formatConfigIssue } from "./errors.js";
export type { ConfigErrorCode, ConfigErrorOptions, ConfigIssue } from "./errors.js";

// Parsing
export { parseConfig, loadConfig, readConfigText } from "./parse.js";
export type { ParseConfigOptions, LoadConfigOptions } from "./parse.js";

// Config types and defaults
export { CONFIG_DEFAULTS, HOST_SERVICES_HOSTNAME, hasPreview } from "./types.js";
export type {
  SandboxConfig,
  ServiceConfig,
  HealthCheck,
  PreviewLink,
  PreviewEntry,
  NetworkConfig,
  SecretConfig,
  MountConfig,
  IdleConfig,
  CheckpointConfig,
  LedgerConfig,
  Platform,
} from "./types.js";

// Durations (`idle.suspendAfter`, `checkpoint.every`, `--idle-suspend`)
export { DURATION_PATTERN, parseDuration, formatDuration } from "./duration.js";

// Secrets and mounts
export { parseSecretSource, expandHome } from "./secrets.js";
export { HOST_SERVICE_SECRET_HOST, isHostServiceEntry, secretHostPorts, secretHttpHosts } from "./host-services.js";
export type { SecretSource } from "./secrets.js";
export {
  RESERVED_MOUNT_PATHS,
  RESERVED_SECRET_NAMES,
  SECRET_SOURCE_PATTERN,
  SHAPED_PLACEHOLDER_PATTERN,
  isPathWithin,
} from "./schema.js";
export { hostPatternCovers } from "./rules.js";

// What a config reaches on the host: marks on schema keys, walked by every check and prompt
export { configReaches, configReachKeys } from "./schema.js";
export {
  HOST_REACH_KINDS,
  HOST_REACH_ORDER,
  describeReaches,
  markedKeys,
  marksOf,
  reachMarkOf,
  reachPath,
  reaches,
  reachesNothing,
  SOUNDS_LIKE_HOST_REACH,
  unmarkedKeys,
} from "./host-reach.js";
export type { ConfigReach, HostReachKind, HostReachMark, HostReachValue } from "./host-reach.js";

// Profiles
export { PROFILES, PROFILE_NAMES, DEFAULT_PROFILE } from "./profiles.js";
export type { ProfileName, Resources } from "./profiles.js";

// Names
export { ENV_NAME_PATTERN, HOST_PATTERN } from "./schema.js";
export {
  INSTANCE_NAME_PATTERN,
  IMAGE_NAME_PATTERN,
  isImageName,
  SERVICE_NAME_PATTERN,
  isValidInstanceName,
  assertValidInstanceName,
  isValidServiceName,
} from "./names.js";

// Limits
export { LIMITS } from "./limits.js";
export type { Limits } from "./limits.js";

// Text from a guest, made safe to print
export { escapeControlChars, hasControlChars } from "./control-chars.js";
export type { ControlCharOptions } from "./control-chars.js";

// Helpers every package shares: shell quoting, crash-safe file writes, file hashes
export { shellQuote } from "./shell-quote.js";
export { writeFileAtomic, writeJsonAtomic } from "./atomic-file.js";
export { sha256File } from "./file-hash.js";

// Service references
export { resolvePublicUrlReferences, referencedServices, findServicePlaceholders } from "./references.js";
export type { ServicePlaceholder } from "./references.js";

// Rendering and JSON Schema
export { renderConfig } from "./render.js";
export { yamlLib } from "./yaml-lib.js";
export { SANDBOX_SCHEMA_ID, sandboxJsonSchema } from "./json-schema.js";
