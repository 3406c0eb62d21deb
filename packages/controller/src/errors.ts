// The controller's coded error: its closed code union (its own codes and those of the packages
// under it, kept as they come), the wire form, and the cross-copy guard.
import {
  defineCodedError,
  type CodedErrorJson,
  type CodedErrorOptions,
  type ConfigErrorCode,
} from "@pi-sandbox/config/core";
import type { ImageErrorCode } from "@pi-sandbox/image";
import type { IngressErrorCode } from "@pi-sandbox/ingress";
import type { SupervisorErrorCode } from "@pi-sandbox/supervisor";
import type { VmErrorCode } from "@pi-sandbox/vm";

/** The controller's own codes. */
export type ControllerOwnErrorCode =
  | "CONTROLLER_BAD_INPUT"
  | "CONTROLLER_USAGE"
  | "CONTROLLER_UNKNOWN_ACTION"
  | "CONTROLLER_INVALID_NAME"
  | "CONTROLLER_STATE_INSECURE"
  | "CONTROLLER_STATE_CORRUPT"
  | "CONTROLLER_NOT_FOUND"
  | "CONTROLLER_ALREADY_EXISTS"
  | "CONTROLLER_NOT_RUNNING"
  | "CONTROLLER_AGENT_REATTACHED"
  | "CONTROLLER_CONFIRM_MISMATCH"
  | "CONTROLLER_USER_ONLY"
  | "CONTROLLER_CONFIRMATION_REQUIRED"
  | "CONTROLLER_USER_DECLINED"
  | "CONTROLLER_CONFIG_CHANGED"
  | "CONTROLLER_NODE_MISSING"
  | "CONTROLLER_DAEMON_START_FAILED"
  | "CONTROLLER_DASHBOARD_START_FAILED"
  | "CONTROLLER_DAEMON_LOST"
  | "CONTROLLER_DAEMON_EXITING"
  | "CONTROLLER_SETUP_FAILED"
  | "CONTROLLER_IDENTITY_FAILED"
  | "CONTROLLER_VM_EXITED"
  | "CONTROLLER_SOCKET_PATH_TOO_LONG"
  | "CONTROLLER_PREVIEW_LIMIT"
  | "CONTROLLER_IMAGE_MISSING"
  | "CONTROLLER_IMAGE_IN_USE"
  | "CONTROLLER_FILE_EXISTS"
  | "CONTROLLER_HOST_PORT_CONFLICT"
  | "CONTROLLER_SECRET_UNAVAILABLE"
  | "CONTROLLER_MOUNT_REFUSED"
  | "CONTROLLER_HOST_PATH_REFUSED"
  | "CONTROLLER_GUEST_NAME_REFUSED"
  | "CONTROLLER_LEDGER_BROKEN"
  | "CONTROLLER_EGRESS_NOT_WAITING"
  | "CONTROLLER_EGRESS_NO_GRANT"
  | "CONTROLLER_GUEST_GIT_MISSING"
  | "CONTROLLER_HOST_GIT_MISSING"
  | "CONTROLLER_DIFF_BASE_MISSING"
  | "CONTROLLER_WORKSPACE_SNAPSHOT_FAILED"
  | "CONTROLLER_PATCH_REFUSED"
  | "CONTROLLER_PATCH_TOO_LARGE"
  | "CONTROLLER_PATCH_FAILED"
  | "CONTROLLER_UNCOMMITTED_CHANGES"
  | "CONTROLLER_CONTEXT_INVALID"
  | "CONTROLLER_CONTEXT_NOT_FOUND"
  | "CONTROLLER_CONTEXT_EXISTS"
  | "CONTROLLER_CONTEXT_UNREACHABLE"
  | "CONTROLLER_CONTEXT_VERSION_MISMATCH"
  | "CONTROLLER_CONTEXT_LOST"
  | "CONTROLLER_CONTEXT_REFUSED"
  | "CONTROLLER_INTERNAL";

/**
 * Stable codes of every error the controller reports: its own, and those of the packages under
 * it, which the daemon passes on unchanged (`toControllerError`). Anything else (a Node system
 * error's `ENOENT`, say) arrives as `CONTROLLER_INTERNAL` with the original code in
 * `details.cause`.
 */
export type ControllerErrorCode =
  ControllerOwnErrorCode | ConfigErrorCode | ImageErrorCode | VmErrorCode | SupervisorErrorCode | IngressErrorCode;

/** Options of a ControllerError: `hint`, `details` and `cause`. */
export type ControllerErrorOptions = CodedErrorOptions;

/**
 * The wire form of an error: what the daemon sends and the CLI prints, `{name, code, message,
 * hint?, details?}`. `name` is optional when read, for a daemon of an older release.
 */
export type ControllerErrorJson = Omit<CodedErrorJson, "name" | "code"> & {
  /** The class name; absent from a daemon of an older release. */
  name?: string;
  /** One of the union: the daemon sends only ControllerErrors (`toControllerError`). */
  code: ControllerErrorCode;
};

const kind = defineCodedError<ControllerErrorCode, "ControllerError">("ControllerError", "CONTROLLER_");

/** Every failure of the controller and its client; switch on `code`. */
export class ControllerError extends kind.Base {
  /** The wire form, its code typed as one of the union. */
  override toJSON(): ControllerErrorJson & { name: string } {
    return { ...super.toJSON(), code: this.code };
  }

  /** Rebuilds an error from its wire form. */
  static fromJSON(json: ControllerErrorJson): ControllerError {
    return new ControllerError(json.code, json.message, { hint: json.hint, details: json.details });
  }
}

/** True for a ControllerError (with `code`, of that code), also one from another installed copy of this package. */
export function isControllerError(value: unknown, code?: ControllerErrorCode): value is ControllerError {
  return kind.is(value, code);
}
