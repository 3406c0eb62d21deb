// review-setup's coded error and its codes; controller errors pass through with their own.
import { defineCodedError, type CodedErrorOptions } from "@pi-sandbox/config";

/** Stable codes of review-setup failures; controller errors pass through with their own codes. */
export type ReviewSetupErrorCode =
  /** The command line is wrong (unknown flag, missing `--name`, bad `--live-model` or `--model-server`). */
  | "REVIEW_SETUP_USAGE"
  /** `--repo` (or the cwd) is not inside a git or jj checkout, or listing its files failed. */
  | "REVIEW_SETUP_NOT_A_REPO"
  /** Building the snapshot archive on the host failed. */
  | "REVIEW_SETUP_SNAPSHOT_FAILED"
  /** The instance does not exist and no `--config` was given. */
  | "REVIEW_SETUP_INSTANCE_MISSING"
  /** The instance exists but is not running. */
  | "REVIEW_SETUP_INSTANCE_NOT_RUNNING"
  /** `--config` was given but the instance already exists. */
  | "REVIEW_SETUP_INSTANCE_EXISTS"
  /** Another refresh of the same instance holds its refresh lock; `details.holder` names it. */
  | "REVIEW_SETUP_BUSY"
  /** The guest lacks a tool the refresh needs (node ≥ 24, npm, tar). */
  | "REVIEW_SETUP_GUEST_TOOL_MISSING"
  /** The archive's checksum in the guest differs from the host's. */
  | "REVIEW_SETUP_CHECKSUM_MISMATCH"
  /** A guest step (transfer, unpack, install, build, switch, agent) failed; `details.logPath` names its log. */
  | "REVIEW_SETUP_STEP_FAILED"
  /** The host has no Pi login for the `--live-model` provider. */
  | "REVIEW_SETUP_LOGIN_MISSING"
  /** The host's credential for the provider cannot be used (a refresh failed, a `!command` key…). */
  | "REVIEW_SETUP_TOKEN_UNUSABLE"
  /** `--live-model`: the provider, or its kind of login, cannot be kept on the host (no API host known, or a token a placeholder cannot stand for). */
  | "REVIEW_SETUP_PROVIDER_UNSUPPORTED"
  /** `--live-model`: the instance declares no `network.secrets` entry for the provider's credential (made before this, or without `--config`). */
  | "REVIEW_SETUP_SECRET_MISSING"
  /**
   * `--live-model`: the instance needs a restart (suspend and resume) before the VM uses the
   * provider's newly declared secret, and none was allowed (`--restart`, or yes at the prompt).
   */
  | "REVIEW_SETUP_RESTART_NEEDED"
  /** The live check did not produce a generated response. */
  | "REVIEW_SETUP_LIVE_CHECK_FAILED"
  /** `--model-server`: the server did not answer (the host's request, or the guest's). */
  | "REVIEW_SETUP_MODEL_SERVER_UNREACHABLE"
  /** `--model-server`: the server answered `GET …/models` with an HTTP error (e.g. 401: it wants a key). */
  | "REVIEW_SETUP_MODEL_SERVER_REFUSED"
  /** `--model-server`: `PI_SANDBOX_LOCAL_MODEL` pins a model the server does not list; `details.ids` lists those it does. */
  | "REVIEW_SETUP_MODEL_NOT_SERVED"
  /** `--model-server`: the server's answer lists no usable model (or is not an OpenAI-style model list). */
  | "REVIEW_SETUP_MODEL_SERVER_NO_MODELS"
  /** `--model-server` without `--config`: the existing instance does not list the server's port in `network.hostPorts`. */
  | "REVIEW_SETUP_HOST_PORT_MISSING";

/** Options of a ReviewSetupError: `hint`, `details` and `cause`. */
export type ReviewSetupErrorOptions = CodedErrorOptions;

const kind = defineCodedError<ReviewSetupErrorCode, "ReviewSetupError">("ReviewSetupError", "REVIEW_SETUP_");

/** Failures of `sandbox:setup`; switch on `code`. */
export class ReviewSetupError extends kind.Base {}

/** True for a ReviewSetupError from any installed copy of this package; with `code`, only for that code. */
export const isReviewSetupError: (value: unknown, code?: ReviewSetupErrorCode) => value is ReviewSetupError = kind.is;
