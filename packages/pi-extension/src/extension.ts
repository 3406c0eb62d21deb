// The extension factory. Loading registers a tool and a command and nothing else: no daemon,
// socket, timer or VM starts here, and session_shutdown is deliberately not handled, because
// environments outlive Pi.

import type { ExtensionAPI, ExtensionFactory } from "@earendil-works/pi-coding-agent";
import { createSandboxCommand } from "./command.js";
import { createSandboxTool, type SandboxDependencies } from "./tool.js";

/** Returns a Pi extension factory wired to the given controller client. */
export function createSandboxExtension(deps: SandboxDependencies): ExtensionFactory {
  return (pi: ExtensionAPI) => {
    pi.registerTool(createSandboxTool(deps));
    pi.registerCommand("sandbox", createSandboxCommand(deps));
  };
}
