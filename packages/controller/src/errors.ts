/** Stable codes of every error the controller reports. */
export type ControllerErrorCode =
  | "CONTROLLER_BAD_INPUT"
  | "CONTROLLER_UNKNOWN_ACTION"
  | "CONTROLLER_INVALID_NAME"
  | "CONTROLLER_STATE_INSECURE"
  | "CONTROLLER_STATE_CORRUPT"
  | "CONTROLLER_NOT_FOUND"
  | "CONTROLLER_ALREADY_EXISTS"
  | "CONTROLLER_NOT_RUNNING"
  | "CONTROLLER_CONFIRM_MISMATCH"
  | "CONTROLLER_USER_ONLY"
  | "CONTROLLER_NODE_MISSING"
  | "CONTROLLER_DAEMON_START_FAILED"
  | "CONTROLLER_DAEMON_LOST"
  | "CONTROLLER_DAEMON_EXITING"
  | "CONTROLLER_SETUP_FAILED"
  | "CONTROLLER_VM_EXITED"
  | "CONTROLLER_SOCKET_PATH_TOO_LONG"
  | "CONTROLLER_PREVIEW_LIMIT"
  | "CONTROLLER_IMAGE_MISSING"
  | "CONTROLLER_HOST_PORT_CONFLICT"
  | "CONTROLLER_SECRET_UNAVAILABLE"
  | "CONTROLLER_MOUNT_REFUSED"
  | "CONTROLLER_INTERNAL"
  | (string & {});

const brand = Symbol.for("pi-sandbox.ControllerError");

/** Options of a ControllerError. */
export interface ControllerErrorOptions {
  /** What to do next, shown to users and models. */
  hint?: string;
  /** Structured, JSON-safe facts about the failure. */
  details?: Record<string, unknown>;
  /** The underlying error, kept for logs. */
  cause?: unknown;
}

/** The wire form of an error: what the daemon sends and the CLI prints. */
export interface ControllerErrorJson {
  code: string;
  message: string;
  hint?: string;
  details?: Record<string, unknown>;
}

/** Every failure of the controller and its client; switch on `code`. */
export class ControllerError extends Error {
  override readonly name = "ControllerError";
  /** Stable error code. */
  readonly code: ControllerErrorCode;
  /** What to do next. */
  readonly hint: string | undefined;
  /** Structured facts. */
  readonly details: Record<string, unknown>;
  readonly [brand] = true;

  constructor(code: ControllerErrorCode, message: string, options: ControllerErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.hint = options.hint;
    this.details = options.details ?? {};
  }

  /** The `{code, message, hint, details}` wire form. */
  toJSON(): ControllerErrorJson {
    const json: ControllerErrorJson = { code: this.code, message: this.message };
    if (this.hint) json.hint = this.hint;
    if (Object.keys(this.details).length > 0) json.details = this.details;
    return json;
  }

  /** Rebuilds an error from its wire form. */
  static fromJSON(json: ControllerErrorJson): ControllerError {
    return new ControllerError(json.code, json.message, { hint: json.hint, details: json.details });
  }
}

/** True for a ControllerError from any installed copy of this package. */
export function isControllerError(value: unknown): value is ControllerError {
  return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[brand] === true;
}
