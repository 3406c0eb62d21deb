// The config package's coded error: its codes, the issues found in a file (path, line, column),
// and the one-line form of an issue.
import { defineCodedError, type CodedErrorOptions } from "./coded-error.js";

/** Stable codes of every error this package throws; callers switch on these. */
export type ConfigErrorCode =
  | "CONFIG_YAML_SYNTAX"
  | "CONFIG_INVALID"
  | "CONFIG_TOO_LARGE"
  | "CONFIG_NOT_FOUND"
  | "CONFIG_READ_FAILED"
  | "CONFIG_INVALID_NAME"
  | "CONFIG_UNRESOLVED_REFERENCE";

/** One problem found in a config file. */
export interface ConfigIssue {
  /** Dotted path from the document root (`services.web.port`); empty for document-level problems. */
  path: string;
  /** A full sentence naming the path, without the location. */
  message: string;
  /** 1-based line of the offending node, when known. */
  line?: number;
  /** 1-based column of the offending node, when known. */
  column?: number;
}

/** Options of a ConfigError. */
export interface ConfigErrorOptions extends CodedErrorOptions {
  /** Every problem found, in document order. */
  issues?: ConfigIssue[];
}

const kind = defineCodedError<ConfigErrorCode, "ConfigError">("ConfigError", "CONFIG_");

/** Every failure of reading, parsing or validating a config; switch on `code`. */
export class ConfigError extends kind.Base {
  /** Every problem found; empty when the failure is not about the file's content. */
  readonly issues: ConfigIssue[];

  constructor(code: ConfigErrorCode, message: string, options: ConfigErrorOptions = {}) {
    super(code, message, options);
    this.issues = options.issues ?? [];
  }
}

/** True for a ConfigError (with `code`, of that code), also one from another installed copy of this package. */
export function isConfigError(value: unknown, code?: ConfigErrorCode): value is ConfigError {
  return kind.is(value, code);
}

/** One issue as a line of text: its message followed by `(line L, column C)` when known. */
export function formatConfigIssue(issue: ConfigIssue): string {
  if (issue.line === undefined) return issue.message;
  return `${issue.message} (line ${issue.line}, column ${issue.column ?? 1})`;
}
