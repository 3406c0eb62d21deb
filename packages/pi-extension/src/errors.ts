// The Pi extension's own coded error and its codes; controller errors keep their own.
import { defineCodedError, type CodedErrorOptions } from "@pi-sandbox/config";

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

/** Options of a SandboxExtensionError: `hint`, `details` and `cause`. */
export type SandboxExtensionErrorOptions = CodedErrorOptions;

const kind = defineCodedError<SandboxExtensionErrorCode, "SandboxExtensionError">(
  "SandboxExtensionError",
  "PI_SANDBOX_",
);

/** Failures that start in the Pi package rather than in the controller; switch on `code`. */
export class SandboxExtensionError extends kind.Base {}

/** True for a SandboxExtensionError from any installed copy of this package; with `code`, only for that code. */
export const isSandboxExtensionError: (
  value: unknown,
  code?: SandboxExtensionErrorCode,
) => value is SandboxExtensionError = kind.is;
