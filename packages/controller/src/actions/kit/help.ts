// Help text for models and humans, generated from the action table and the config's tables.
import { CONFIG_DEFAULTS, DEFAULT_PROFILE, HOST_SERVICES_HOSTNAME, LIMITS, PROFILES } from "@pi-sandbox/config";
import { actionUsage, type ActionSpec } from "./define.js";

/**
 * Help for models and humans, generated from the action table (`ACTIONS`, passed in: the help
 * action is one of them) and the config package's tables.
 */
export function renderActionHelp(actions: readonly ActionSpec[], options: { includeUserOnly?: boolean } = {}): string {
  const lines: string[] = [];
  lines.push("pi-sandbox: named local dev environments in QEMU microVMs. Send one JSON action.");
  lines.push("");
  lines.push("Actions:");
  for (const spec of actions) {
    if (spec.userOnly && !options.includeUserOnly) continue;
    lines.push(`- ${spec.name}${spec.userOnly ? " (user only)" : ""}: ${spec.summary}`);
    lines.push(`    ${actionUsage(spec)}`);
    for (const a of spec.args) lines.push(`    ${a.name}${a.required ? "" : " (optional)"}: ${a.text}`);
  }
  lines.push("");
  lines.push("sandbox.yaml keys (unknown keys are errors):");
  lines.push("  version: 1 | profile: " + Object.keys(PROFILES).join("|") + ` (default ${DEFAULT_PROFILE})`);
  lines.push(
    `  resources: {cpus, memoryGiB} overrides the profile | diskGiB: integer >= 2, default ${CONFIG_DEFAULTS.diskGiB}`,
  );
  lines.push(
    `  workspace: absolute guest path, default ${CONFIG_DEFAULTS.workspace} | image: Gondolin assets dir, relative to the YAML`,
  );
  lines.push("  setup: [commands] at create/prepare | resume: [commands] at every start");
  lines.push("  network.allowedHosts: [host | *.domain]; empty blocks all outbound HTTP(S)");
  lines.push(
    `  network.hostPorts: [port], at most ${LIMITS.hostPortsMax}; the guest reaches host 127.0.0.1:<port> over TCP as ${HOST_SERVICES_HOSTNAME}:<port>, nothing else of the host`,
  );
  lines.push(
    `  network.secrets: {NAME: {from: env:VAR | file:PATH, hosts: [host], headers?: [name], placeholderPrefix?: text, placeholderFrom?: file:PATH}}, at most ${LIMITS.secretsMax}; the guest sees a placeholder in $NAME`,
  );
  lines.push(
    "    (after placeholderPrefix, for a client that tells credentials apart by their start, e.g. sk-ant-oat01-; or placeholderFrom's file, shaped like a credential the client parses),",
  );
  lines.push(
    "    the host puts the value (read at each start) into authorization, x-api-key, proxy-authorization or a listed header of HTTPS requests",
  );
  lines.push(
    "    to port 443 of those hosts only (elsewhere a placeholder gets 403), and scrubs it from every answer; hosts must be in allowedHosts,",
  );
  lines.push(
    `    or ${HOST_SERVICES_HOSTNAME} (every hostPorts port) or ${HOST_SERVICES_HOSTNAME}:<port> (one): HTTP to that port then goes through a host proxy`,
  );
  lines.push(
    "    e.g. network: {allowedHosts: [api.github.com], secrets: {GITHUB_TOKEN: {from: env:GITHUB_TOKEN, hosts: [api.github.com]}}}",
  );
  lines.push(
    `  mounts: [{host: dir relative to the YAML, guest: /abs/path}], at most ${LIMITS.mountsMax}; read-only, e.g. [{host: ./docs, guest: /mnt/docs}]`,
  );
  lines.push(
    "  idle: {suspendAfter: 15m} (10s-168h; default off): suspend by itself after that long unused (no preview request or WebSocket, action, terminal, running command, guest CPU); the next preview request or action resumes it",
  );
  lines.push(
    "  checkpoint: {every: 5m} (30s-24h or off; default 5m): while it runs, checkpoint the disk after that much guest activity (actions, previews, terminals, guest CPU, disk writes); a crash then loses at most that much",
  );
  lines.push('  services.<name>: command (required), cwd, port, env, health ("/path" | "process"; default TCP),');
  lines.push(
    `    timeoutMs (default ${CONFIG_DEFAULTS.timeoutMs}), preview (true | {url,title,description}), previews, platforms`,
  );
  lines.push("  env may use ${services.NAME.publicURL}; PORT and PUBLIC_URL are supplied, never set.");
  lines.push("");
  lines.push(
    "Profiles: " +
      Object.entries(PROFILES)
        .map(([p, r]) => `${p} ${r.cpus} cpu/${r.memoryGiB} GiB`)
        .join(", "),
  );
  lines.push(
    `Limits: exec wait 0-${LIMITS.execWaitMaxMs} ms (default ${LIMITS.execWaitDefaultMs}); output and reads ${LIMITS.outputMaxBytes / 1024} KiB; ` +
      `writes ${LIMITS.writeMaxBytes / 1024 / 1024} MiB; ${LIMITS.completedExecHandles} completed exec handles; setup ${LIMITS.setupDeadlineMs / 60000} min; ` +
      `resume wait ${LIMITS.resumeWaitMs / 1000} s; service restart after ${LIMITS.serviceRestartDelayMs} ms; logs ${LIMITS.logLinesDefault}/${LIMITS.logLinesMax} lines.`,
  );
  lines.push(
    "Previews are http://127.x.y.z:<port> URLs, a loopback address per instance (its own browser cookies; 127.0.0.1 where only that exists), unauthenticated, reachable by other local processes.",
  );
  lines.push("Stop keeps the disk; memory and processes do not survive. Destroy needs confirm equal to the name.");
  return lines.join("\n");
}
