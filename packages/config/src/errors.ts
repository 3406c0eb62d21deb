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
export interface ConfigErrorOptions {
  /** Every problem found, in document order. */
  issues?: ConfigIssue[];
  /** What to do next. */
  hint?: string;
  /** Structured, JSON-safe facts (for example the source path). */
  details?: Record<string, unknown>;
  /** The underlying error. */
  cause?: unknown;
}

const brand = Symbol.for("pi-sandbox.ConfigError");

/** Every failure of reading, parsing or validating a config; switch on `code`. */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
  /** Stable error code. */
  readonly code: ConfigErrorCode;
  /** Every problem found; empty when the failure is not about the file's content. */
  readonly issues: ConfigIssue[];
  /** What to do next. */
  readonly hint: string | undefined;
  /** Structured facts. */
  readonly details: Record<string, unknown>;
  readonly [brand] = true;

  constructor(code: ConfigErrorCode, message: string, options: ConfigErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.issues = options.issues ?? [];
    this.hint = options.hint;
    this.details = options.details ?? {};
  }
}

/** True for a ConfigError from any installed copy of this package. */
export function isConfigError(value: unknown): value is ConfigError {
  return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[brand] === true;
}

/** One issue as a line of text: its message followed by `(line L, column C)` when known. */
export function formatConfigIssue(issue: ConfigIssue): string {
  if (issue.line === undefined) return issue.message;
  return `${issue.message} (line ${issue.line}, column ${issue.column ?? 1})`;
}
