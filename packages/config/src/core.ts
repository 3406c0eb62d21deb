// @pi-sandbox/config/core: the part of this package that loads without the config schema
// (valibot) or YAML: the coded errors, entry names, the config's defaults and types, and crash-safe
// file writes. For code on the way to a daemon's spawn (the CLI's early start of `start <name>`),
// where each module loaded is time before the boot. The package index exports all of it too.

export { CodedError, isCodedError, brandError, hasBrand, messageOf, defineCodedError } from "./coded-error.js";
export type { CodedErrorOptions, CodedErrorJson, CodedErrorKind } from "./coded-error.js";
export { ConfigError, isConfigError, formatConfigIssue } from "./errors.js";
export type { ConfigErrorCode, ConfigErrorOptions, ConfigIssue } from "./errors.js";
export { CONFIG_DEFAULTS } from "./types.js";
export type { SandboxConfig, CheckpointConfig } from "./types.js";
export {
  INSTANCE_NAME_PATTERN,
  IMAGE_NAME_PATTERN,
  isImageName,
  SERVICE_NAME_PATTERN,
  isValidInstanceName,
  assertValidInstanceName,
  isValidServiceName,
} from "./names.js";
export { writeFileAtomic, writeJsonAtomic } from "./atomic-file.js";
