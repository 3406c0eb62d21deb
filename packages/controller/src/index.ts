// The package's root export is the client, name for name (`./client` is the same API; the apps
// import that). The daemon and the CLI are programs (`pi-sandbox`, `dist/daemon/main.js`), not
// library surface.

// Calling actions
export { callAction, renderHelp } from "./client/index.js";
export type { CallActionOptions } from "./client/index.js";
// Errors
export { ControllerError, isControllerError, CodedError, isCodedError, brandError, hasBrand } from "./client/index.js";
export type {
  ControllerErrorCode,
  ControllerErrorJson,
  ControllerErrorOptions,
  CodedErrorJson,
  CodedErrorOptions,
} from "./client/index.js";
// Actions and help
export { ACTIONS, findAction, findCliAction, validateAction } from "./client/index.js";
export type {
  ActionName,
  ActionInput,
  ActionResult,
  ActionSpec,
  ArgumentDoc,
  ActionRoute,
  CliMapping,
  DaemonContext,
  LocalContext,
  ValidatedAction,
  ExecView,
  ControllerLogTail,
  ServiceLogRead,
  CopyResult,
  ServicesView,
  DashboardInfo,
  DashboardAbsent,
  DashboardStopped,
  AuditRead,
  AuditVerdict,
  LedgerEntry,
  LedgerKind,
  CheckpointTaken,
  CheckpointView,
  ForkResult,
} from "./client/index.js";
// Reading a ledger
export { ledgerEntryLine } from "./client/index.js";
// Egress approvals
export { ANSWERER_FRESH_MS, dropEgressAnswerer, markEgressAnswerer, readEgressAsks } from "./client/index.js";
export type {
  EgressAnswer,
  EgressAnswered,
  EgressAnswerer,
  EgressAsk,
  EgressGrant,
  EgressTally,
  EgressView,
} from "./client/index.js";
// State views
export { StateLayout, resolveStateRoot } from "./client/index.js";
export type {
  EntryKind,
  EntryView,
  EntryState,
  PreviewLinkInfo,
  RecordedError,
  ProgressEvent,
  DoctorCheck,
  ConfirmFn,
  ConfirmRequest,
  ConcernKind,
  HostConcern,
} from "./client/index.js";
// Printing guest text
export { escapeControlChars, hasControlChars } from "./client/index.js";
export type { ControlCharOptions } from "./client/index.js";
