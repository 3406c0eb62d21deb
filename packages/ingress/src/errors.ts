// The ingress package's coded error and its codes.
import { defineCodedError, type CodedErrorOptions } from "@pi-sandbox/config";

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
  | "INGRESS_LEASE_STORE_FAILED"
  /** A gateway was given an address to bind that is not an IPv4 loopback address. */
  | "INGRESS_INVALID_ADDRESS";

/** Options of a {@link IngressError}: `hint`, `details` and `cause`. */
export type IngressErrorOptions = CodedErrorOptions;

const kind = defineCodedError<IngressErrorCode, "IngressError">("IngressError", "INGRESS_");

/** The one error class of `@pi-sandbox/ingress`; switch on `code`, show `hint` to the user. */
export class IngressError extends kind.Base {}

/** True for an {@link IngressError}, also one from another installed copy of this package; with `code`, only for that code. */
export const isIngressError: (value: unknown, code?: IngressErrorCode) => value is IngressError = kind.is;
