// The instance step: create the instance (`--config`, with the model server's host port and the
// live credentials' secrets added) or require a running one, then check the guest's tools.
import { chmod, mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import {
  hostPatternCovers,
  isConfigError,
  isHostServiceEntry,
  LIMITS,
  loadConfig,
  renderConfig,
  type SandboxConfig,
  type SecretConfig,
} from "@pi-sandbox/config";
import { callAction, isControllerError, type CallActionOptions } from "@pi-sandbox/controller/client";
import { ReviewSetupError } from "./errors.js";
import type { ControllerOptions } from "./guest.js";

/** What `ensureInstance` needs. */
export interface EnsureInstanceOptions {
  /** Instance name. */
  name: string;
  /** Host path of a sandbox.yaml: create the instance from it (refused if it exists). */
  config?: string;
  /** A host port the instance must list in `network.hostPorts` (added to `config` when creating). */
  hostPort?: number;
  /**
   * `network.secrets` to add to `config`, asked for only when creating (live credentials kept on
   * the host); their hosts are added to `network.allowedHosts` where not covered.
   */
  secrets?: () => Promise<Record<string, SecretConfig>>;
  /** Directory for a derived config (`<dir>/<name>.sandbox.yaml`). */
  configDir: string;
  /** Controller call; default `callAction`. */
  callAction?: (input: unknown, options?: CallActionOptions) => Promise<unknown>;
  signal?: AbortSignal;
}

/** What the instance declares, as `inspect` (or `create`) shows it. */
export interface InstanceView {
  state?: string;
  hostPorts?: number[];
  /** `network.secrets`: names and hosts (never a source or value). */
  secrets?: { name: string; hosts: string[] }[];
}

/**
 * Creates the instance from `config`, or requires an existing one to be running. With `hostPort`,
 * a created instance gets it added to `network.hostPorts` and an existing one must list it; with
 * `secrets`, a created instance gets them added. Resolves with the instance's view.
 */
export async function ensureInstance(
  options: EnsureInstanceOptions,
  controller: ControllerOptions,
  info: (message: string) => void,
): Promise<InstanceView> {
  const { name, signal, hostPort } = options;
  const call = (action: Record<string, unknown>) =>
    (options.callAction ?? callAction)(action, {
      ...controller,
      signal,
      onProgress: (event) => info(`${event.stage}: ${event.message}`),
    });
  let view: InstanceView | undefined;
  try {
    view = (await call({ action: "inspect", name })) as InstanceView;
  } catch (error) {
    if (!isControllerError(error) || error.code !== "CONTROLLER_NOT_FOUND") throw error;
  }
  if (options.config) {
    if (view) {
      throw new ReviewSetupError("REVIEW_SETUP_INSTANCE_EXISTS", `instance ${name} already exists (${view.state})`, {
        hint: `Drop --config to refresh it, or choose another --name.`,
        details: { state: view.state },
      });
    }
    const derived = await derivedConfig(resolve(controller.cwd ?? process.cwd(), options.config), options, info);
    return (await call({ action: "create", name, config: derived ?? options.config })) as InstanceView;
  }
  if (!view) {
    throw new ReviewSetupError("REVIEW_SETUP_INSTANCE_MISSING", `instance ${name} does not exist`, {
      hint: `Create it with: bun run sandbox:setup --name ${name} --config packages/review-setup/sandbox.review.yaml`,
    });
  }
  if (view.state !== "running") {
    throw new ReviewSetupError("REVIEW_SETUP_INSTANCE_NOT_RUNNING", `instance ${name} is ${view.state}, not running`, {
      hint: `Start it with: npx pi-sandbox start ${name} (then rerun this command).`,
      details: { state: view.state },
    });
  }
  if (hostPort !== undefined && !(view.hostPorts ?? []).includes(hostPort)) {
    const listed = view.hostPorts?.length ? view.hostPorts.join(", ") : "none";
    throw new ReviewSetupError(
      "REVIEW_SETUP_HOST_PORT_MISSING",
      `instance ${name} cannot reach host port ${hostPort} (its network.hostPorts: ${listed})`,
      {
        hint:
          `Host ports are fixed when an instance is created: destroy ${name} (npx pi-sandbox destroy ${name} --confirm ${name}) and ` +
          `create it again with --config <sandbox.yaml> --model-server, which adds the port, or with ${hostPort} in its network.hostPorts.`,
        details: { hostPort, hostPorts: view.hostPorts ?? [] },
      },
    );
  }
  return view;
}

/**
 * The config to create from when something needs adding: the config at `path` plus the host port
 * and the secrets (with their hosts in `allowedHosts`), written to `<configDir>/<name>.sandbox.yaml`
 * (0600) and kept there. Undefined when nothing needs adding, or for a config that does not load
 * (`create` reports it as usual).
 */
async function derivedConfig(
  path: string,
  options: EnsureInstanceOptions,
  info: (message: string) => void,
): Promise<string | undefined> {
  const port = options.hostPort;
  let config: SandboxConfig;
  try {
    config = await loadConfig(path, { signal: options.signal });
  } catch (error) {
    if (isConfigError(error)) return undefined;
    throw error;
  }
  const secrets = (await options.secrets?.()) ?? {};
  const addPort = port !== undefined && !config.network.hostPorts.includes(port);
  if (!addPort && Object.keys(secrets).length === 0) return undefined;
  if (addPort && config.network.hostPorts.length >= LIMITS.hostPortsMax) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_USAGE",
      `${path} already lists ${LIMITS.hostPortsMax} host ports, the most a sandbox.yaml may; --model-server needs ${port} too`,
      { hint: `Remove a port from network.hostPorts in ${path}, or list ${port} there in place of one.` },
    );
  }
  const taken = Object.keys(secrets).filter((secret) => Object.hasOwn(config.network.secrets, secret));
  if (taken.length > 0) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_USAGE",
      `${path} declares network.secrets ${taken.join(", ")}, which review-setup declares itself (the host's Pi login, --model-server-key)`,
      {
        hint: `Remove ${taken.join(", ")} from network.secrets in ${path}: review-setup keeps that credential on the host and fills it in.`,
        details: { secrets: taken },
      },
    );
  }
  const allowedHosts = [...config.network.allowedHosts];
  for (const secret of Object.values(secrets)) {
    for (const host of secret.hosts) {
      // host.sandbox.internal[:<port>] goes by network.hostPorts, not the HTTP(S) allow-list.
      if (isHostServiceEntry(host)) continue;
      if (!allowedHosts.some((pattern) => hostPatternCovers(pattern, host))) allowedHosts.push(host);
    }
  }
  const derived = join(options.configDir, `${options.name}.sandbox.yaml`);
  await mkdir(options.configDir, { recursive: true, mode: 0o700 });
  const text = renderConfig({
    ...config,
    network: {
      ...config.network,
      allowedHosts,
      hostPorts: addPort ? [...config.network.hostPorts, port] : config.network.hostPorts,
      secrets: { ...config.network.secrets, ...secrets },
    },
  });
  const added = [
    ...(addPort ? [`network.hostPorts ${port} (the model server)`] : []),
    ...(Object.keys(secrets).length > 0
      ? [`network.secrets ${Object.keys(secrets).join(", ")} (credentials kept on the host)`]
      : []),
  ].join(" and ");
  await writeFile(derived, `# ${path} plus ${added}, written by sandbox:setup\n${text}`, { mode: 0o600 });
  await chmod(derived, 0o600);
  info(`creating from ${derived}: ${path} plus ${added}`);
  return derived;
}

/** Tools the refresh runs in the guest; `node` must also be Node 24 or newer. */
export const GUEST_TOOLS = ["tar", "node", "npm"] as const;

/** Oldest Node major the candidate's install and build support (the workspace's engines). */
export const MIN_GUEST_NODE_MAJOR = 24;

export const GUEST_PROBE =
  `pwd; for t in ${GUEST_TOOLS.join(" ")}; do command -v "$t" >/dev/null 2>&1 || echo "missing:$t"; done; ` +
  `command -v node >/dev/null 2>&1 && echo "node-version:$(node --version 2>&1)"; true`;

const TOOL_FIX =
  "Use an image that has Node 24 and npm — the guest test image does (`npm run -s test-image`, then `image: <that directory>` in sandbox.yaml) — " +
  "or add setup steps that install them (packages/review-setup/README.md, Guest requirements), then create the instance again.";

/** Throws REVIEW_SETUP_GUEST_TOOL_MISSING, naming each missing tool (or an old Node) and the fix. */
export function checkGuestTools(name: string, probeOutput: string): void {
  const missing = [...probeOutput.matchAll(/^missing:(\S+)$/gm)].map((m) => m[1]!);
  if (missing.length > 0) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_GUEST_TOOL_MISSING",
      `the guest of ${name} lacks ${missing.join(", ")} on PATH (the refresh needs ${GUEST_TOOLS.join(", ")})`,
      { hint: TOOL_FIX, details: { missing } },
    );
  }
  const version = /^node-version:(.*)$/m.exec(probeOutput)?.[1]?.trim() ?? "";
  const major = Number(/^v(\d+)\./.exec(version)?.[1]);
  if (!(major >= MIN_GUEST_NODE_MAJOR)) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_GUEST_TOOL_MISSING",
      `the guest of ${name} has node ${version || "(no version)"}; the review candidate needs Node ${MIN_GUEST_NODE_MAJOR} or newer`,
      { hint: TOOL_FIX, details: { missing: ["node"], nodeVersion: version } },
    );
  }
}
