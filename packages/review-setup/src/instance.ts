// The instance step: create the instance (`--config`) or require a running one (with
// `--model-server`, listing the server's host port), then check the guest's tools.
import { chmod, mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { isConfigError, LIMITS, loadConfig, renderConfig } from "@pi-sandbox/config";
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
  /** Directory for a config with the added port (`<dir>/<name>.sandbox.yaml`). */
  configDir: string;
  /** Controller call; default `callAction`. */
  callAction?: (input: unknown, options?: CallActionOptions) => Promise<unknown>;
  signal?: AbortSignal;
}

/**
 * Creates the instance from `config`, or requires an existing one to be running. With `hostPort`,
 * a created instance gets it added to `network.hostPorts` and an existing one must list it.
 */
export async function ensureInstance(
  options: EnsureInstanceOptions,
  controller: ControllerOptions,
  info: (message: string) => void,
): Promise<void> {
  const { name, signal, hostPort } = options;
  const call = (action: Record<string, unknown>) =>
    (options.callAction ?? callAction)(action, {
      ...controller,
      signal,
      onProgress: (event) => info(`${event.stage}: ${event.message}`),
    });
  let view: { state?: string; hostPorts?: number[] } | undefined;
  try {
    view = (await call({ action: "inspect", name })) as { state?: string; hostPorts?: number[] };
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
    let config = options.config;
    if (hostPort !== undefined) {
      config = await configWithHostPort(resolve(controller.cwd ?? process.cwd(), config), hostPort, options, info);
    }
    await call({ action: "create", name, config });
    return;
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
}

/**
 * The config to create from: `path` itself when it already lists `port`, else the same config
 * plus the port, written to `<configDir>/<name>.sandbox.yaml` (0600) and kept there. A config that
 * does not load is passed on as it is, so that `create` reports it as usual.
 */
async function configWithHostPort(
  path: string,
  port: number,
  options: EnsureInstanceOptions,
  info: (message: string) => void,
): Promise<string> {
  let config;
  try {
    config = await loadConfig(path, { signal: options.signal });
  } catch (error) {
    if (isConfigError(error)) return path;
    throw error;
  }
  if (config.network.hostPorts.includes(port)) return path;
  if (config.network.hostPorts.length >= LIMITS.hostPortsMax) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_USAGE",
      `${path} already lists ${LIMITS.hostPortsMax} host ports, the most a sandbox.yaml may; --model-server needs ${port} too`,
      { hint: `Remove a port from network.hostPorts in ${path}, or list ${port} there in place of one.` },
    );
  }
  const derived = join(options.configDir, `${options.name}.sandbox.yaml`);
  await mkdir(options.configDir, { recursive: true, mode: 0o700 });
  const text = renderConfig({
    ...config,
    network: { ...config.network, hostPorts: [...config.network.hostPorts, port] },
  });
  await writeFile(
    derived,
    `# ${path} plus network.hostPorts ${port}, written by sandbox:setup --model-server\n${text}`,
    {
      mode: 0o600,
    },
  );
  await chmod(derived, 0o600);
  info(`creating from ${derived}: ${path} plus network.hostPorts ${port} (the model server)`);
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
