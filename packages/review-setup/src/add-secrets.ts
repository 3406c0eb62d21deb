// Live mode on an instance created any other way (the CLI, a template, before review-setup kept
// credentials on the host): the provider's secrets are added to it (`secrets-add`), and since a
// VM keeps the secrets it booted with, it is restarted only when allowed (`--restart`, or yes at
// the prompt), as a suspend and resume: its processes and services keep running.
import type { CallActionOptions } from "@pi-sandbox/controller/client";
import { isCodedError } from "@pi-sandbox/config";
import { ReviewSetupError } from "./errors.js";
import type { ControllerOptions } from "./guest.js";
import { declareLiveSecrets } from "./host-secrets.js";
import type { InstanceView } from "./instance.js";
import type { LiveSecret } from "./providers.js";

/** What `ensureLiveSecrets` needs. */
export interface EnsureLiveSecretsOptions {
  /** Instance name. */
  name: string;
  /** The instance as `inspect` showed it. */
  view: InstanceView;
  /** The `--live-model` provider. */
  provider: string;
  /** The secret that carries its credential. */
  secret: LiveSecret;
  /** review-setup's state directory (secret files). */
  stateDir: string;
  /** `--restart`: restart without asking. */
  restart: boolean;
  /** Asks the user (a terminal); absent: nobody to ask. */
  confirm?: (question: string) => Promise<boolean>;
  /** Controller call. */
  call: (input: unknown, options?: CallActionOptions) => Promise<unknown>;
  controller: ControllerOptions;
  /** Progress lines. */
  info: (message: string) => void;
  signal?: AbortSignal;
}

/** The instance's view afterwards, and what the summary should say about a restart. */
export interface EnsureLiveSecretsResult {
  view: InstanceView;
  /** Set when the instance was restarted (or declared secrets): one line for the summary. */
  note?: string;
}

/** A restored instance's view: how its last start used the saved memory. */
interface StartedView extends InstanceView {
  restore?: { warm: true; restoreMs: number } | { warm: false; reason: string };
}

/**
 * Makes sure the running VM of an existing instance has `secret`: declares the provider's missing
 * secrets, or finds (through the `secrets` action) a secret declared after the VM booted; then
 * restarts it if allowed, else REVIEW_SETUP_RESTART_NEEDED. Nothing is restarted silently.
 */
export async function ensureLiveSecrets(options: EnsureLiveSecretsOptions): Promise<EnsureLiveSecretsResult> {
  const { name, view, secret, call } = options;
  const callOptions = { ...options.controller, signal: options.signal };
  const declared = (candidate: InstanceView) =>
    candidate.secrets?.find((s) => s.name === secret.name && secret.hosts.every((h) => s.hosts.includes(h)));
  let reason: string;
  if (!declared(view)) {
    const all = await declareLiveSecrets(options.stateDir, name, [options.provider]);
    const missing = Object.fromEntries(
      Object.entries(all).filter(([secretName]) => !view.secrets?.some((s) => s.name === secretName)),
    );
    const added = (await call({ action: "secrets-add", name, secrets: missing }, callOptions)) as {
      added: string[];
      allowedHostsAdded: string[];
    };
    options.info(
      `added network.secrets ${added.added.join(", ")} to ${name}` +
        (added.allowedHostsAdded.length ? ` (allowedHosts + ${added.allowedHostsAdded.join(", ")})` : "") +
        "; its VM uses them from its next start or resume",
    );
    reason = `declares ${secret.name} now, which its VM, booted before, does not have`;
  } else {
    try {
      await call({ action: "secrets", name }, callOptions);
      return { view };
    } catch (error) {
      if (!isCodedError(error) || error.code !== "VM_SECRET_INVALID") throw error;
    }
    reason = `declares ${secret.name}, but its VM booted before the secret was added`;
  }
  const question =
    `Instance ${name} ${reason}. Restart it now as a suspend and resume (its processes and services keep ` +
    "running; they start again only if its memory cannot be restored)? [y/N] ";
  const allowed = options.restart || (options.confirm ? await options.confirm(question) : false);
  if (!allowed) {
    throw new ReviewSetupError("REVIEW_SETUP_RESTART_NEEDED", `instance ${name} ${reason}; it was not restarted`, {
      hint:
        `Rerun with --restart (a suspend and resume: processes keep running), or restart it yourself ` +
        `(npx pi-sandbox suspend ${name} && npx pi-sandbox start ${name}) and rerun.`,
      details: { secret: secret.name },
    });
  }
  options.info(`suspending ${name} to restart it with the new secrets`);
  await call({ action: "suspend", name }, callOptions);
  const started = (await call({ action: "start", name }, callOptions)) as StartedView;
  const restore = started.restore;
  const note =
    restore && !restore.warm
      ? `${name} was restarted for the new secrets and booted cold (${restore.reason}): its services were started again.`
      : `${name} was suspended and resumed for the new secrets: its processes kept running.`;
  options.info(note);
  return { view: started, note };
}
