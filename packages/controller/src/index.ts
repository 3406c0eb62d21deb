// The package's root export is the client: the action API, its types and help. The daemon and the
// CLI are programs (`pi-sandbox`, `dist/daemon/main.js`), not library surface.

// Calling actions
export { callAction } from "./client/index.js";
export type { CallActionOptions } from "./client/index.js";
// Errors
export { ControllerError, isControllerError } from "./client/index.js";
export type { ControllerErrorCode, ControllerErrorJson, ControllerErrorOptions } from "./client/index.js";
export { CodedError, isCodedError } from "./client/index.js";
export type { CodedErrorJson, CodedErrorOptions } from "./client/index.js";
// Actions and help
export { ACTIONS, findAction, findCliAction, validateAction, renderHelp } from "./client/index.js";
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
  ServicesView,
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
} from "./client/index.js";
// Printing guest text
export { escapeControlChars, hasControlChars } from "./client/index.js";
export type { ControlCharOptions } from "./client/index.js";
