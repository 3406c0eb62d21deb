// Public API of @pi-sandbox/review-setup (`npm run sandbox:setup`): everything not listed here is
// private.

// Errors
export { ReviewSetupError, isReviewSetupError } from "./errors.js";
export type { ReviewSetupErrorCode, ReviewSetupErrorOptions } from "./errors.js";
// Command line
export { parseCommandLine, parseModel, USAGE, DEFAULT_PI_COMMAND } from "./args.js";
export type { ReviewSetupArgs, ParsedCommandLine } from "./args.js";
export { main, formatResult } from "./main.js";
export type { CliIo } from "./main.js";
// Refresh
export { runReviewSetup } from "./refresh.js";
export type { ReviewSetupOptions, ReviewSetupResult, StepEvent, StepName } from "./refresh.js";
export { ensureInstance, GUEST_TOOLS, MIN_GUEST_NODE_MAJOR } from "./instance.js";
export type { EnsureInstanceOptions, InstanceView } from "./instance.js";
// Install scope
export {
  scopeCommands,
  INSTALL_SCOPES,
  DEFAULT_INSTALL_COMMAND,
  DEFAULT_BUILD_COMMAND,
  PI_EXTENSION_DIR,
} from "./scope.js";
export type { InstallScope, StepCommands } from "./scope.js";
// Refresh lock
export { acquireRefreshLock, defaultLockDir, refreshLockPath } from "./lock.js";
export type { RefreshLockHolder, RefreshLockSeams } from "./lock.js";
// Snapshot and transfer
export { listWorkingFiles, createSnapshot, sha256File } from "./snapshot.js";
export type { Snapshot, SnapshotOptions, WorkingFiles, Vcs } from "./snapshot.js";
// Guest access, layout, launch
export { controllerGuest } from "./guest.js";
export { shellQuote } from "@pi-sandbox/config";
export type { GuestSession, GuestResult, ControllerOptions } from "./guest.js";
export { reviewLayout } from "./layout.js";
export type { ReviewLayout } from "./layout.js";
export { launchCommand } from "./launch.js";
export type { LaunchCommandOptions } from "./launch.js";
// Live mode
export { resolveHostCredential, hostAgentDir, MIN_TOKEN_LIFETIME_MS, REFRESH_BELOW_MS } from "./credentials.js";
export type { HostCredential, ResolveHostCredentialOptions } from "./credentials.js";
export { LIVE_PROVIDERS, liveSecret, providerSecrets, secretDeclaration } from "./providers.js";
export type { LiveProvider, LiveSecret } from "./providers.js";
export {
  declareLiveSecrets,
  pushLiveSecret,
  requireSecret,
  hostLoginProviders,
  secretsDir,
  unsetValue,
  writeSecretFile,
} from "./host-secrets.js";
export { refreshHostLoginWithPi } from "./pi-login.js";
export type { HostLoginRefresher, HostLoginRefreshRequest, PiLoginOptions } from "./pi-login.js";
export { storeGuestCredential, keepCredentialOnHost, runLiveCheck, parseLiveOutput, LIVE_PROMPT } from "./live.js";
export type { LiveCheck, TokenUsage } from "./live.js";
// Local model server
export { parseModelServer, readServedModels, servedModelsOf } from "./model-server.js";
export { localProviderConfig, installLocalModels, LOCAL_PROVIDER, LOCAL_MODELS_EXTENSION } from "./local-models.js";
export type { ModelServer, ServedModels, ReadServedModelsOptions } from "./model-server.js";
