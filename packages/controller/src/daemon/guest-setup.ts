// The first-boot steps of a new disk: the host YAML read once, its text written into the guest as
// the editable `.sandbox.yaml`, the setup commands run with progress, and the workspace they leave
// recorded in the guest's workspace store (what `diff` compares with).

import { createHash } from "node:crypto";
import { posix } from "node:path";
import { parseConfig, readConfigText, shellQuote, type SandboxConfig } from "@pi-sandbox/config";
import type { SetupResult, SupervisorClient } from "@pi-sandbox/supervisor";
import { ControllerError } from "../errors.js";
import type { ProgressEvent } from "../wire.js";
import { withSetupProgress } from "./setup-progress.js";
import { takeCreatedSnapshot } from "./workspace-snapshots.js";

/**
 * Reads a host sandbox.yaml once: the validated config, and its text for the guest's own copy
 * (comments kept). With `sha256`, a text that is not the one the caller checked (the file changed
 * since the user trusted it) is refused with CONTROLLER_CONFIG_CHANGED.
 */
export async function readConfigFile(path: string, sha256?: string): Promise<{ config: SandboxConfig; text: string }> {
  const { text, sourcePath } = await readConfigText(path);
  if (sha256 !== undefined && createHash("sha256").update(text).digest("hex") !== sha256) {
    throw new ControllerError(
      "CONTROLLER_CONFIG_CHANGED",
      `${path} changed after it was checked; nothing was created`,
      {
        hint: "Check the file's content and ask again.",
        details: { path },
      },
    );
  }
  return { config: parseConfig(text, { sourcePath }), text };
}

/** Writes the host YAML's text (comments kept) as the guest's editable `.sandbox.yaml`. */
export async function installGuestConfig(supervisor: SupervisorClient, text: string): Promise<void> {
  await supervisor.exec(`mkdir -p ${shellQuote(supervisor.workspace)}`, { cwd: "/", timeoutMs: 30_000 });
  await supervisor.writeFile(posix.join(supervisor.workspace, ".sandbox.yaml"), text);
}

/**
 * Runs the config's setup commands in the guest, reporting start, each command and its output, and
 * end, and records the workspace they leave as the instance's created state (workspace-snapshots.ts).
 */
export async function runSetup(
  supervisor: SupervisorClient,
  config: SandboxConfig,
  progress: (event: ProgressEvent) => void,
): Promise<SetupResult> {
  progress({ stage: "setup", message: `running setup (${config.setup.length} command(s), 20 min deadline)` });
  const setup = await withSetupProgress(supervisor, progress, supervisor.runSetup({ commands: config.setup }));
  // The workspace as the create (or a template's prepare) leaves it: what `diff` compares with.
  await takeCreatedSnapshot(supervisor, progress);
  // On the disk before it is recorded as done: a controller that dies later leaves a run whose
  // disk a start recovers, and it then trusts that setup's work is there and does not run it again.
  await supervisor.exec("sync", { cwd: "/", timeoutMs: 60_000 }).catch(() => undefined);
  progress({
    stage: "setup",
    message: setup.ok
      ? `setup done in ${(setup.durationMs / 1000).toFixed(1)} s`
      : `setup failed (exit ${setup.exitCode})`,
  });
  return setup;
}
