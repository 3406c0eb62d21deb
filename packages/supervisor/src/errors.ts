// The supervisor's coded error: its codes (the agent's wire codes among them) and the mapping of
// an agent's code to ours.
import { defineCodedError, messageOf, type CodedErrorOptions } from "@pi-sandbox/config";
import { AGENT_PROTOCOL_CODES } from "./protocol.js";

/**
 * Stable codes of every error this package raises. Callers switch on these. The unprefixed ones
 * are older than the prefix rule: most are the guest agent's wire names (`KNOWN_CODES`), and six
 * are the host's own (`GUEST_PYTHON_MISSING`, `AGENT_START_FAILED`, `AGENT_CLOSED`,
 * `AGENT_PROTOCOL`, `AGENT_UNRESPONSIVE`, `SERVICE_REFERENCE_UNRESOLVED`), kept as users and
 * callers know them. A new code, host-only or not, takes the `SUPERVISOR_` prefix.
 */
export type SupervisorErrorCode =
  /** The guest has no `python3`; commands and services need it (`details.tool`). */
  | "GUEST_PYTHON_MISSING"
  /** The agent could not be installed or did not say hello in time. */
  | "AGENT_START_FAILED"
  /** The agent channel closed (agent exited, VM closed, or `close()` was called). */
  | "AGENT_CLOSED"
  /**
   * The agent broke the protocol (a line too long, not JSON, a reply that is not what was asked
   * for) or speaks another version. After a break the channel is closed with this error.
   */
  | "AGENT_PROTOCOL"
  /** The agent did not answer a request in time (the guest may be overloaded or hung). */
  | "AGENT_UNRESPONSIVE"
  /** More requests in flight than the agent accepts; retry shortly. */
  | "AGENT_BUSY"
  /** A bug inside the agent while serving one request; the channel stays usable. */
  | "AGENT_INTERNAL"
  /** An argument is out of range or malformed (`details.key`). */
  | "INVALID_ARGUMENT"
  /** The working directory of a command does not exist in the guest. */
  | "CWD_NOT_FOUND"
  /** The guest could not start the command at all. */
  | "EXEC_FAILED"
  /** No command with this handle exists in this session. */
  | "EXEC_HANDLE_NOT_FOUND"
  /** The handle belonged to a completed command that was dropped to keep the newest 128. */
  | "EXEC_HANDLE_EXPIRED"
  /** The guest file does not exist. */
  | "FILE_NOT_FOUND"
  /** The path names a directory. */
  | "FILE_IS_DIRECTORY"
  /** The agent may not read or write the path. */
  | "FILE_ACCESS_DENIED"
  /** The path should be a directory (a listing, a copy into it) but is something else. */
  | "FILE_NOT_DIRECTORY"
  /** The parent directory of a write does not exist. */
  | "FILE_PARENT_MISSING"
  /** The file or the data is larger than the allowed size (`details.maxBytes`). */
  | "FILE_TOO_LARGE"
  /** The data that arrived does not match its sha256 (or CRC-32); nothing was written or returned. */
  | "FILE_CHECKSUM_MISMATCH"
  /** Another file-system error (`details.errno`). */
  | "FILE_IO"
  /** A chunked transfer expired or was never opened. */
  | "TRANSFER_NOT_FOUND"
  /** The guest has no transfer disk; the client copies over the stream instead, so callers do not see it. */
  | "TRANSFER_DISK_MISSING"
  /** The guest `<workspace>/.sandbox.yaml` does not exist. */
  | "SUPERVISOR_GUEST_CONFIG_NOT_FOUND"
  /** The guest `<workspace>/.sandbox.yaml` is not valid (`cause` is the ConfigError). */
  | "SUPERVISOR_GUEST_CONFIG_INVALID"
  /** No service by that name is declared or running. */
  | "SERVICE_NOT_FOUND"
  /** An ad-hoc service-start used a name the guest YAML declares. */
  | "SERVICE_DECLARED"
  /** A service did not pass its readiness check in time; it keeps running and restarting. */
  | "SERVICE_NOT_READY"
  /** A `${services.NAME.publicURL}` reference has no preview origin to resolve to. */
  | "SERVICE_REFERENCE_UNRESOLVED"
  /** No free guest port was left to allocate. */
  | "PORT_EXHAUSTED"
  /** A setup run is already in progress in this guest. */
  | "RUN_IN_PROGRESS";

/** Options of a {@link SupervisorError}: `hint`, `details` and `cause`. */
export type SupervisorErrorOptions = CodedErrorOptions;

const kind = defineCodedError<SupervisorErrorCode, "SupervisorError">("SupervisorError", "SUPERVISOR_");

/** The one error class of `@pi-sandbox/supervisor`; switch on `code`, show `hint` to the user. */
export class SupervisorError extends kind.Base {}

/** True for a {@link SupervisorError}, also one from another installed copy of this package; with `code`, only for that code. */
export const isSupervisorError: (value: unknown, code?: SupervisorErrorCode) => value is SupervisorError = kind.is;

/**
 * Codes the host keeps as they come from the agent (plus the host's own); the agent's wire codes
 * among them are checked against the Python source by test/agent-contract.test.ts.
 */
export const KNOWN_CODES: ReadonlySet<string> = new Set<string>([
  "GUEST_PYTHON_MISSING",
  "AGENT_START_FAILED",
  "AGENT_CLOSED",
  "AGENT_PROTOCOL",
  "AGENT_UNRESPONSIVE",
  "AGENT_BUSY",
  "AGENT_INTERNAL",
  "INVALID_ARGUMENT",
  "CWD_NOT_FOUND",
  "EXEC_FAILED",
  "EXEC_HANDLE_NOT_FOUND",
  "EXEC_HANDLE_EXPIRED",
  "FILE_NOT_FOUND",
  "FILE_IS_DIRECTORY",
  "FILE_ACCESS_DENIED",
  "FILE_NOT_DIRECTORY",
  "FILE_PARENT_MISSING",
  "FILE_TOO_LARGE",
  "FILE_CHECKSUM_MISMATCH",
  "FILE_IO",
  "TRANSFER_NOT_FOUND",
  "TRANSFER_DISK_MISSING",
  "SUPERVISOR_GUEST_CONFIG_NOT_FOUND",
  "SUPERVISOR_GUEST_CONFIG_INVALID",
  "SERVICE_NOT_FOUND",
  "SERVICE_DECLARED",
  "SERVICE_NOT_READY",
  "SERVICE_REFERENCE_UNRESOLVED",
  "PORT_EXHAUSTED",
  "RUN_IN_PROGRESS",
] satisfies SupervisorErrorCode[]);

/** Maps an agent error code to ours: a protocol disagreement becomes AGENT_PROTOCOL, an unknown code AGENT_INTERNAL. */
export function codeFromAgent(code: unknown): SupervisorErrorCode {
  if (typeof code === "string" && KNOWN_CODES.has(code)) return code as SupervisorErrorCode;
  if (typeof code === "string" && AGENT_PROTOCOL_CODES.has(code)) return "AGENT_PROTOCOL";
  return "AGENT_INTERNAL";
}

/** The message of any thrown value. */
export { messageOf };
