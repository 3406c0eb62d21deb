// Public API of @pi-sandbox/supervisor: everything not listed here is private.

// Client
export { SupervisorClient, GUEST_CONFIG_NAME } from "./client.js";
export {
  agentBootArgument,
  writeAgentSeed,
  AGENT_SEED_PATH,
  DEFAULT_AGENT_PATH,
  DEFAULT_AGENT_STATE_DIR,
} from "./placement.js";
export type {
  AgentPlacementOptions,
  StartSupervisorOptions,
  CallOptions,
  WaitOptions,
  ExecOptions,
  ServiceOpOptions,
  SetupOptions,
  ResumeOptions,
} from "./options.js";
export type { AgentEvent } from "./channel.js";
export type { PreviewOrigins } from "./service-specs.js";

// Results
export type {
  AgentActivity,
  AgentDoor,
  AgentHello,
  GuestIdentity,
  ExecResult,
  ExecKillResult,
  TextRead,
  WriteResult,
  ServiceState,
  ServiceExit,
  ServiceStatus,
  ServiceFailure,
  ServicesResult,
  RunStep,
  SetupResult,
  ResumeResult,
  LogTail,
  AdHocServiceSpec,
} from "./types.js";
export type { LogFollowed, SetupFollowed } from "./log-follow.js";
export { GuestFiles, LIST_MAX_ENTRIES } from "./guest-files.js";
export type { GuestStat, GuestTree, GuestTreeEntry, GuestEntryType } from "./file-tree.js";
export type { ReadSink, WriteSource } from "./file-transfer.js";

// The guest agent zipapp and the wire protocol
export { agentArchivePath, readAgentArchive } from "./agent-script.js";
export { PROTOCOL_VERSION, MAX_AGENT_LINE_BYTES } from "./protocol.js";
export { agentDoorOf } from "./replies.js";

// Logging
export { silentLogger, type SupervisorLogger } from "./logger.js";

// Errors
export { SupervisorError, isSupervisorError, type SupervisorErrorCode, type SupervisorErrorOptions } from "./errors.js";
