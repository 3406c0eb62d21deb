// A new guest starts as a copy: of the image (hostname "sandbox", an empty machine-id) or of a
// template's guest (the same machine-id, hostname and, when its setup made them, ssh host keys,
// and, resumed from a suspended template's memory, the same running processes). Its first boot
// gives it its own: the agent writes it when the host's first hello carries it, else an exec does;
// the agent reseeds the kernel's random generator at every attach (every hello carries entropy).
import { randomBytes } from "node:crypto";
import { shellQuote } from "@pi-sandbox/config";
import type { GuestIdentity, SupervisorClient } from "@pi-sandbox/supervisor";
import { ControllerError } from "../errors.js";

/** The progress line of the identity step. */
export const IDENTITY_PROGRESS = "giving the guest its own machine-id, hostname and ssh host keys";

/** A new guest's identity for its agent's hello: a machine-id from the host's generator, `name` as hostname. */
export function newGuestIdentity(name: string): GuestIdentity {
  return { machineId: randomBytes(16).toString("hex"), hostname: name };
}

/**
 * The identity exec, for an agent that did not write the hello's (older than that, or a name it
 * does not take as a hostname): a new machine-id (`machineId`, 32 hex digits), the instance's name as
 * hostname, and no ssh host keys (the next terminal's `ssh-keygen -A` makes new ones). Shell
 * built-ins where they do: every program started under software emulation costs tens of ms, and
 * this runs on the way to a warm clone's first preview byte (`od`, `tr` and `hostname` took about
 * 0.3 s of its 0.55 s); `rm` runs only when a template's setup made keys.
 */
export function identityScript(name: string, machineId = randomBytes(16).toString("hex")): string {
  if (!/^[0-9a-f]{32}$/.test(machineId)) throw new Error("a machine-id is 32 lowercase hex digits");
  return [
    "set -e",
    `printf '%s\\n' ${machineId} > /etc/machine-id`,
    'set -- /etc/ssh/ssh_host_*; if [ -e "$1" ]; then rm -f "$@"; fi',
    `printf '%s\\n' ${shellQuote(name)} > /etc/hostname`,
    // sethostname(2) as `hostname` does; a guest that refuses it keeps /etc/hostname for its next boot.
    `printf '%s' ${shellQuote(name)} 2>/dev/null > /proc/sys/kernel/hostname || true`,
  ].join("\n");
}

/** Gives the guest of a new instance or template its own identity by an exec; fails the start if it cannot. */
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
