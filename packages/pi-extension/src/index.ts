// Public API of @pi-sandbox/pi-extension, and its default export: the extension Pi loads (the
// `sandbox` tool and the /sandbox command), wired to the real controller client.
import { callAction } from "@pi-sandbox/controller/client";
import { createSandboxExtension } from "./extension.js";

// Extension
export { createSandboxExtension } from "./extension.js";
export { createSandboxTool } from "./tool.js";
export type { CallActionFn, SandboxDependencies } from "./tool.js";
export { createSandboxCommand } from "./command.js";
export type { SandboxCommandOptions } from "./command.js";
// Attach: Pi's built-in tools in an instance
export { Attachments, ATTACH_ENTRY } from "./attach.js";
export { ROUTED_TOOLS } from "./guest-tools.js";
// The environment moving with the conversation: checkpoints per turn, /tree rewind, /fork fork
export { EnvironmentBranches, REWIND_CHOICES, FORK_CHOICES } from "./branching.js";
export { resolvePoint, pointLabel, leafAfterNavigation } from "./branch-points.js";
export type { CheckpointInfo, ResolvedPoint, TreeEntry } from "./branch-points.js";
// Input and results
export { prepareSandboxArguments, peekAction } from "./input.js";
export type { ActionPeek, SandboxToolParams } from "./input.js";
export type { SandboxToolDetails, SandboxToolResult } from "./format.js";
// Errors
export { SandboxExtensionError, isSandboxExtensionError } from "./errors.js";
export type { SandboxExtensionErrorCode, SandboxExtensionErrorOptions } from "./errors.js";

/** What Pi loads: the extension wired to the real controller client. */
const sandboxExtension = createSandboxExtension({ callAction });
export default sandboxExtension;
