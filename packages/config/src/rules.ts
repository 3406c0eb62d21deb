// Rules that look at more than one field: fixed-port and host-port uniqueness, folder uniqueness
// within a service, `${services.NAME.publicURL}` references (existence, preview, platform, cycles)
// and the start order those references imply. They run on the raw parsed value, guarding every
// shape, so their findings are reported together with structural problems elsewhere in the file.
import { escapeControlChars } from "./control-chars.js";
import { dottedPath, isPlainRecord, quotePath } from "./describe.js";
import { LIMITS } from "./limits.js";
import { findServicePlaceholders } from "./references.js";
import { HOST_SERVICE_SECRET_HOST, SECRET_HOST_PATTERN } from "./host-services.js";
import { isPathWithin, posixNormal } from "./schema.js";
import { HOST_SERVICES_HOSTNAME } from "./types.js";
import type { LocatedIssue } from "./validate.js";

interface Edge {
  from: string;
  to: string;
  envName: string;
}

function servicesOf(raw: unknown): Record<string, Record<string, unknown>> {
  const result: Record<string, Record<string, unknown>> = {};
  if (!isPlainRecord(raw) || !isPlainRecord(raw.services)) return result;
  for (const [name, service] of Object.entries(raw.services)) if (isPlainRecord(service)) result[name] = service;
  return result;
}

/** Whether a raw service runs on the (always Linux) guest; malformed platforms count as included. */
function includedOnLinux(service: Record<string, unknown>): boolean {
  const platforms = service.platforms;
  if (!Array.isArray(platforms) || platforms.length === 0) return true;
  return platforms.includes("linux");
}

function hasPreviewRaw(service: Record<string, unknown>): boolean {
  return (
    service.preview === true ||
    isPlainRecord(service.preview) ||
    (Array.isArray(service.previews) && service.previews.length > 0)
  );
}

function envPath(from: string, envName: string): string[] {
  return ["services", from, "env", envName];
}

function portIssues(services: Record<string, Record<string, unknown>>, out: LocatedIssue[]): void {
  const owners = new Map<number, string>();
  for (const [name, service] of Object.entries(services)) {
    const port = service.port;
    if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) continue;
    const owner = owners.get(port);
    if (owner === undefined) {
      owners.set(port, name);
      continue;
    }
    const segments = ["services", name, "port"];
    out.push({
      segments,
      at: "value",
      message: `${quotePath(dottedPath(segments))} ${port} is already the port of service ${owner}; fixed ports must be unique, so change one or omit it to get a free port`,
    });
  }
}

function hostPortIssues(raw: unknown, out: LocatedIssue[]): void {
  if (!isPlainRecord(raw) || !isPlainRecord(raw.network) || !Array.isArray(raw.network.hostPorts)) return;
  // A longer list is refused by its length already; this keeps a hostile list from adding an issue per entry.
  if (raw.network.hostPorts.length > LIMITS.hostPortsMax) return;
  const first = new Map<number, number>();
  raw.network.hostPorts.forEach((port: unknown, index) => {
    if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) return;
    const earlier = first.get(port);
    if (earlier === undefined) {
      first.set(port, index);
      return;
    }
    const segments = ["network", "hostPorts", index];
    out.push({
      segments,
      at: "value",
      message: `${quotePath(dottedPath(segments))} repeats port ${port} (already \`network.hostPorts.${earlier}\`); list each host port once`,
    });
  });
}

/** True when the allow-list pattern `allowed` matches every host `pattern` can match. */
export function hostPatternCovers(allowed: string, pattern: string): boolean {
  const a = allowed.toLowerCase();
  const p = pattern.toLowerCase();
  if (a === p) return true;
  if (!a.startsWith("*.")) return false;
  const suffix = a.slice(1); // ".example.com"
  return p.endsWith(suffix) && p.length > suffix.length && !p.slice(0, -suffix.length).endsWith(".");
}

function secretIssues(raw: unknown, out: LocatedIssue[]): void {
  if (!isPlainRecord(raw) || !isPlainRecord(raw.network) || !isPlainRecord(raw.network.secrets)) return;
  const allowedRaw = raw.network.allowedHosts;
  const allowed = Array.isArray(allowedRaw)
    ? allowedRaw.filter((host): host is string => typeof host === "string")
    : [];
  const hostPorts = Array.isArray(raw.network.hostPorts)
    ? raw.network.hostPorts.filter((port): port is number => typeof port === "number")
    : [];
  // The count is refused by the schema; a hostile file gets no issue per entry beyond it.
  if (Object.keys(raw.network.secrets).length > LIMITS.secretsMax) return;
  for (const [name, secret] of Object.entries(raw.network.secrets)) {
    if (!isPlainRecord(secret) || !Array.isArray(secret.hosts)) continue;
    secret.hosts.forEach((host: unknown, index) => {
      if (typeof host !== "string" || !SECRET_HOST_PATTERN.test(host)) return;
      const segments = ["network", "secrets", name, "hosts", index];
      const where = `${quotePath(dottedPath(segments))} ${escapeControlChars(JSON.stringify(host))}`;
      const service = HOST_SERVICE_SECRET_HOST.exec(host);
      if (service) {
        const port = service[1] === undefined ? undefined : Number(service[1]);
        if (port === undefined ? hostPorts.length > 0 : hostPorts.includes(port)) return;
        out.push({
          segments,
          at: "value",
          message:
            port === undefined
              ? `${where} sends the value to the host ports of \`network.hostPorts\`, which lists none; list the host service's port there`
              : `${where} names host port ${port}, which \`network.hostPorts\` does not list; add ${port} there too`,
        });
        return;
      }
      if (hostPatternCovers(host, HOST_SERVICES_HOSTNAME)) {
        out.push({
          segments,
          at: "value",
          message: `${where} is a wildcard over ${HOST_SERVICES_HOSTNAME}; name the host services exactly: ${HOST_SERVICES_HOSTNAME} (every port of \`network.hostPorts\`) or ${HOST_SERVICES_HOSTNAME}:<port>`,
        });
        return;
      }
      if (allowed.some((pattern) => hostPatternCovers(pattern, host))) return;
      out.push({
        segments,
        at: "value",
        message: `${where} is not covered by \`network.allowedHosts\`; add it there too (the guest reaches only allowed hosts)`,
      });
    });
  }
}

function mountIssues(raw: unknown, out: LocatedIssue[]): void {
  if (!isPlainRecord(raw) || !Array.isArray(raw.mounts) || raw.mounts.length > LIMITS.mountsMax) return;
  const workspace = typeof raw.workspace === "string" ? posixNormal(raw.workspace) : "/workspace";
  const seen: { path: string; index: number }[] = [];
  raw.mounts.forEach((mount: unknown, index) => {
    if (!isPlainRecord(mount) || typeof mount.guest !== "string" || !mount.guest.startsWith("/")) return;
    const path = posixNormal(mount.guest);
    const segments = ["mounts", index, "guest"];
    const where = quotePath(dottedPath(segments));
    if (isPathWithin(workspace, path)) {
      out.push({
        segments,
        at: "value",
        message: `${where} ${escapeControlChars(JSON.stringify(path))} would cover the workspace ${workspace}; mount under it or elsewhere, such as /mnt/docs`,
      });
      return;
    }
    const clash = seen.find((other) => isPathWithin(path, other.path) || isPathWithin(other.path, path));
    if (clash) {
      out.push({
        segments,
        at: "value",
        message: `${where} ${escapeControlChars(JSON.stringify(path))} overlaps \`mounts.${clash.index}.guest\` ${escapeControlChars(JSON.stringify(clash.path))}; mounts may not be at or inside each other`,
      });
      return;
    }
    seen.push({ path, index });
  });
}

function folderIssues(services: Record<string, Record<string, unknown>>, out: LocatedIssue[]): void {
  for (const [name, service] of Object.entries(services)) {
    if (!Array.isArray(service.previews)) continue;
    const seen = new Set<string>();
    service.previews.forEach((entry: unknown, index) => {
      if (!isPlainRecord(entry) || typeof entry.folder !== "string") return;
      if (!seen.has(entry.folder)) {
        seen.add(entry.folder);
        return;
      }
      const segments = ["services", name, "previews", index, "folder"];
      out.push({
        segments,
        at: "value",
        message: `${quotePath(dottedPath(segments))} repeats the folder name ${escapeControlChars(JSON.stringify(entry.folder))}; folder names must be unique within a service`,
      });
    });
  }
}

function referenceIssues(services: Record<string, Record<string, unknown>>, out: LocatedIssue[]): Edge[] {
  const edges: Edge[] = [];
  for (const [from, service] of Object.entries(services)) {
    if (!isPlainRecord(service.env)) continue;
    const fromIncluded = includedOnLinux(service);
    for (const [envName, value] of Object.entries(service.env)) {
      if (typeof value !== "string") continue;
      const segments = envPath(from, envName);
      const path = quotePath(dottedPath(segments));
      const reported = new Set<string>();
      for (const placeholder of findServicePlaceholders(value)) {
        if (reported.has(placeholder.text)) continue;
        reported.add(placeholder.text);
        const to = placeholder.service;
        const add = (message: string) => out.push({ segments, at: "value", message });
        if (to === undefined) {
          add(
            `${path} uses ${placeholder.text}, which is not a supported reference; only \${services.NAME.publicURL} is`,
          );
          continue;
        }
        const target = Object.hasOwn(services, to) ? services[to] : undefined;
        if (!target) {
          add(`${path} refers to service ${to}, which is not declared under services; declare it or fix the name`);
          continue;
        }
        if (to === from) {
          add(
            `${path} refers to ${from}'s own public URL, so ${from} would have to start before itself; use $PUBLIC_URL, which pi-sandbox sets for previewed services`,
          );
          continue;
        }
        if (!hasPreviewRaw(target)) {
          add(
            `${path} refers to the public URL of service ${to}, which has no preview; add \`preview: true\` to ${to}`,
          );
        } else if (fromIncluded && !includedOnLinux(target)) {
          add(
            `${path} refers to service ${to}, which its platforms exclude on the guest (always Linux); add linux to ${to}'s platforms or remove the reference`,
          );
        }
        if (!edges.some((edge) => edge.from === from && edge.to === to)) edges.push({ from, to, envName });
      }
    }
  }
  return edges;
}

function cycleIssues(names: string[], edges: Edge[], out: LocatedIssue[]): void {
  const state = new Map<string, "visiting" | "done">();
  const stack: string[] = [];
  const visit = (name: string): void => {
    state.set(name, "visiting");
    stack.push(name);
    for (const edge of edges) {
      if (edge.from !== name) continue;
      const seen = state.get(edge.to);
      if (seen === "visiting") {
        const cycle = [...stack.slice(stack.indexOf(edge.to)), edge.to];
        const segments = envPath(edge.from, edge.envName);
        out.push({
          segments,
          at: "value",
          message: `${quotePath(dottedPath(segments))} refers to service ${edge.to}, which closes a cycle of references (${cycle.join(" → ")}); each service must start after the ones it refers to, so remove one reference`,
        });
      } else if (seen === undefined) visit(edge.to);
    }
    stack.pop();
    state.set(name, "done");
  };
  for (const name of names) if (!state.has(name)) visit(name);
}

/** Every cross-field problem of a raw parsed config. */
export function crossFieldIssues(raw: unknown): LocatedIssue[] {
  const services = servicesOf(raw);
  const out: LocatedIssue[] = [];
  portIssues(services, out);
  hostPortIssues(raw, out);
  secretIssues(raw, out);
  mountIssues(raw, out);
  folderIssues(services, out);
  const edges = referenceIssues(services, out);
  cycleIssues(Object.keys(services), edges, out);
  return out;
}

/**
 * The order to start services in: every service after the services it refers to, otherwise in
 * declaration order. Only services that run on Linux are listed. Assumes references are acyclic.
 */
export function startOrder(
  services: Readonly<Record<string, { platforms: readonly string[]; dependsOn: readonly string[] }>>,
): string[] {
  const included = Object.keys(services).filter((name) => services[name]!.platforms.includes("linux"));
  const placed = new Set<string>();
  const order: string[] = [];
  while (order.length < included.length) {
    const next = included.find(
      (name) =>
        !placed.has(name) && services[name]!.dependsOn.every((dep) => placed.has(dep) || !included.includes(dep)),
    );
    if (next === undefined) break; // a cycle; parseConfig rejects those before asking for an order
    placed.add(next);
    order.push(next);
  }
  return order;
}
