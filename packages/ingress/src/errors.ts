/** Stable codes of every error this package raises. Callers switch on these. */
export type IngressErrorCode =
  /** The leased host port of a preview is bound by another process. */
  | "INGRESS_PORT_IN_USE"
  /** The host listener could not be opened for another reason (permissions, address missing). */
  | "INGRESS_LISTEN_FAILED"
  /** A request could not be forwarded to the guest port (refused, reset, timed out, bad response). */
  | "INGRESS_UPSTREAM_FAILED"
  /** The gateway is closed (or closing) and accepts no new previews. */
  | "INGRESS_CLOSED"
  /** A preview description is malformed (key, guest port, link URL or title). */
  | "INGRESS_INVALID_PREVIEW"
  /** `origin(key)` or a similar lookup named a preview that is not open. */
  | "INGRESS_NOT_OPEN"
  /** The port lease store could not be read or written. */
  | "INGRESS_LEASE_STORE_FAILED";

const brand = Symbol.for("pi-sandbox.IngressError");

/** Options of an {@link IngressError}. */
export interface IngressErrorOptions {
  /** The underlying error, passed through untouched. */
  cause?: unknown;
  /** Structured facts for programs (port, preview key, path, ...). */
  details?: Record<string, unknown>;
}

/** The one error class of `@pi-sandbox/ingress`; messages say what happened and what to do next. */
export class IngressError extends Error {
  /** Stable machine-readable code. */
  readonly code: IngressErrorCode;
  /** Structured facts about the failure. */
  readonly details: Record<string, unknown>;

  constructor(code: IngressErrorCode, message: string, options: IngressErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "IngressError";
    this.code = code;
    this.details = options.details ?? {};
    Object.defineProperty(this, brand, { value: true });
  }
}

/** True for an {@link IngressError}, also one from another installed copy of this package. */
export function isIngressError(value: unknown): value is IngressError {
  return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[brand] === true;
}
