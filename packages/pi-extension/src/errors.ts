/** Stable codes of the errors this package reports itself; controller errors keep their own codes. */
export type SandboxExtensionErrorCode =
  /** `/sandbox` was typed without an instance name. */
  | "PI_SANDBOX_COMMAND_USAGE"
  /** `/sandbox attach` reached the instance but could not read what it needs from the guest. */
  | "PI_SANDBOX_ATTACH_FAILED"
  /** The user interrupted a call; the controller and the guest keep working. */
  | "PI_SANDBOX_WAIT_ENDED"
  /** The controller client failed with something that is not a ControllerError (a bug). */
  | "PI_SANDBOX_UNEXPECTED";

/** Options of a SandboxExtensionError. */
export interface SandboxExtensionErrorOptions {
  /** What to do next, shown to users and models. */
  hint?: string;
  /** Structured, JSON-safe facts about the failure. */
  details?: Record<string, unknown>;
  /** The underlying error. */
  cause?: unknown;
}

const brand = Symbol.for("pi-sandbox.SandboxExtensionError");

/** Failures that start in the Pi package rather than in the controller; switch on `code`. */
export class SandboxExtensionError extends Error {
  override readonly name = "SandboxExtensionError";
  /** Stable error code. */
  readonly code: SandboxExtensionErrorCode;
  /** What to do next. */
  readonly hint: string | undefined;
  /** Structured facts. */
  readonly details: Record<string, unknown>;
  readonly [brand] = true;

  constructor(code: SandboxExtensionErrorCode, message: string, options: SandboxExtensionErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.hint = options.hint;
    this.details = options.details ?? {};
  }
}

/** True for a SandboxExtensionError from any installed copy of this package. */
export function isSandboxExtensionError(value: unknown): value is SandboxExtensionError {
  return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[brand] === true;
}
