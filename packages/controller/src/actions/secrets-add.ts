// `secrets-add`: declares more `network.secrets` on an existing instance (its recorded config),
// with their hosts added to `allowedHosts`. A running VM keeps the secrets it booted with; the new
// ones take effect at its next start or resume (`suspend`, then `start`, keeps its processes).
// User only: a model could otherwise send any host file to any host.
import * as v from "valibot";
import {
  hostPatternCovers,
  isConfigError,
  isHostServiceEntry,
  parseConfig,
  renderConfig,
  type SandboxConfig,
  type SecretConfig,
} from "@pi-sandbox/config";
import { ControllerError } from "../errors.js";
import { readRecord, writeRecord } from "../state/records.js";
import { defineAction } from "./kit/define.js";
import { actionSchema, arg, name, nameArg } from "./kit/parts.js";

/** What `secrets-add` did. */
export interface SecretsAddResult {
  /** Secrets declared now. */
  added: string[];
  /** Secrets already declared the same way (nothing changed for them). */
  unchanged: string[];
  /** Hosts added to `network.allowedHosts` for the new secrets. */
  allowedHostsAdded: string[];
  /** Always true when something was added: the VM uses new secrets from its next start or resume. */
  restartNeeded: boolean;
}

/** One declaration as the caller sent it; `parseConfig` checks it with the whole config. */
const declaration = v.record(v.string(), v.record(v.string(), v.unknown()));

export const secretsAdd = defineAction({
  name: "secrets-add",
  summary:
    "declare more network.secrets on an instance (hosts added to allowedHosts); they take effect at its next start or resume",
  args: [
    nameArg,
    arg(
      "secrets",
      "object",
      true,
      "{NAME: {from: env:VAR | file:/abs/path, hosts: [host], headers?, placeholderPrefix?, placeholderFrom?}} as in sandbox.yaml",
      { kind: "credential" },
    ),
  ],
  route: "local",
  userOnly: true,
  schema: actionSchema("secrets-add", { name, secrets: declaration }),
  run: async (args, ctx) => {
    const record = await readRecord(ctx.layout, "instances", args.name);
    if (!record) {
      throw new ControllerError("CONTROLLER_NOT_FOUND", `no instance named ${args.name}`, {
        hint: "Create it first (pi-sandbox create), or check the name with pi-sandbox ls.",
        details: { name: args.name },
      });
    }
    const config = record.config;
    const current = config.network.secrets ?? {};
    const added: string[] = [];
    const unchanged: string[] = [];
    const secrets: Record<string, unknown> = { ...current };
    for (const [secretName, wanted] of Object.entries(args.secrets)) {
      if (Object.hasOwn(current, secretName)) {
        if (sameDeclaration(current[secretName]!, wanted)) {
          unchanged.push(secretName);
          continue;
        }
        throw new ControllerError(
          "CONTROLLER_BAD_INPUT",
          `instance ${args.name} already declares secret ${secretName} differently`,
          {
            hint: "A declared secret is not changed in place: pick another name, or destroy and create the instance again.",
            details: { secret: secretName },
          },
        );
      }
      secrets[secretName] = wanted;
      added.push(secretName);
    }
    if (added.length === 0) return { added, unchanged, allowedHostsAdded: [], restartNeeded: false };
    const allowedHosts = [...config.network.allowedHosts];
    const allowedHostsAdded: string[] = [];
    for (const secretName of added) {
      const hosts = (secrets[secretName] as { hosts?: unknown }).hosts;
      for (const host of Array.isArray(hosts) ? (hosts as unknown[]) : []) {
        if (typeof host !== "string" || isHostServiceEntry(host)) continue;
        if (!allowedHosts.some((pattern) => hostPatternCovers(pattern, host))) {
          allowedHosts.push(host);
          allowedHostsAdded.push(host);
        }
      }
    }
    let next: SandboxConfig;
    try {
      // The new entries alone through the sandbox.yaml schema (JSON is YAML), then the whole
      // config again for the limits across entries.
      const fresh = parseConfig(
        JSON.stringify({
          version: 1,
          network: { allowedHosts, secrets: Object.fromEntries(added.map((n) => [n, secrets[n]])) },
        }),
      );
      next = parseConfig(
        renderConfig({
          ...config,
          network: { ...config.network, allowedHosts, secrets: { ...current, ...fresh.network.secrets } },
        }),
      );
    } catch (error) {
      if (!isConfigError(error)) throw error;
      throw new ControllerError(
        "CONTROLLER_BAD_INPUT",
        `the secrets for ${args.name} are not valid: ${error.message}`,
        {
          hint: "Give each secret as sandbox.yaml's network.secrets does, with absolute file: paths.",
          details: { secrets: added },
          cause: error,
        },
      );
    }
    await writeRecord(ctx.layout, { ...record, config: next });
    return { added, unchanged, allowedHostsAdded, restartNeeded: true };
  },
  formatText: (result) =>
    result.added.length === 0
      ? `nothing to add (${result.unchanged.join(", ") || "no secrets"} already declared)\n`
      : `declared ${result.added.join(", ")}` +
        (result.allowedHostsAdded.length ? `; allowedHosts + ${result.allowedHostsAdded.join(", ")}` : "") +
        "; they take effect at the next start or resume (suspend, then start, keeps processes)\n",
  brief: (result) => `${result.added.length} secret(s) declared`,
});

/** True when `wanted` declares what `declared` does (source, hosts, headers, placeholder). */
function sameDeclaration(declared: SecretConfig, wanted: Record<string, unknown>): boolean {
  const norm = (secret: Record<string, unknown>) =>
    JSON.stringify({
      from: secret.from,
      hosts: [...((secret.hosts as string[] | undefined) ?? [])].map((h) => h.toLowerCase()).sort(),
      headers: [...((secret.headers as string[] | undefined) ?? [])].map((h) => h.toLowerCase()).sort(),
      placeholderPrefix: secret.placeholderPrefix,
      placeholderFrom: secret.placeholderFrom,
    });
  return norm(declared as unknown as Record<string, unknown>) === norm(wanted);
}
