// A new guest starts as a copy: of the image (hostname "sandbox", an empty machine-id) or of a
// template's guest (the same machine-id, hostname and, when its setup made them, ssh host keys,
// and, resumed from a suspended template's memory, the same running processes). Its first boot
// gives it its own; the agent reseeds the kernel's random generator at every attach (the host's
// hello carries fresh entropy).
import { shellQuote } from "@pi-sandbox/config";
import type { SupervisorClient } from "@pi-sandbox/supervisor";
import { ControllerError } from "../errors.js";

/** The progress line of the identity step. */
export const IDENTITY_PROGRESS = "giving the guest its own machine-id, hostname and ssh host keys";

/**
 * A new machine-id (from the just-reseeded kernel generator), the instance's name as hostname,
 * and no ssh host keys (the next terminal's `ssh-keygen -A` makes new ones).
 */
export function identityScript(name: string): string {
  return [
    "set -e",
    `printf '%s\\n' "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')" > /etc/machine-id`,
    "rm -f /etc/ssh/ssh_host_*",
    `printf '%s\\n' ${shellQuote(name)} > /etc/hostname`,
    `hostname ${shellQuote(name)} 2>/dev/null || true`,
  ].join("\n");
}

/** Gives the guest of a new instance or template its own identity; fails the start if it cannot. */
export async function giveOwnIdentity(supervisor: SupervisorClient, name: string): Promise<void> {
  const result = await supervisor.exec(identityScript(name), { cwd: "/", timeoutMs: 30_000 });
  if (result.exitCode !== 0) {
    throw new ControllerError(
      "CONTROLLER_IDENTITY_FAILED",
      `the guest of ${name} could not be given its own identity (exit ${result.exitCode ?? "none"})`,
      {
        hint: "The guest's /etc may be read-only or full; its output is in details.output. Destroy the instance and create it again.",
        details: { name, exitCode: result.exitCode, output: result.output.slice(-2000) },
      },
    );
  }
}
