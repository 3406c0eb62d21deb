// `host.sandbox.internal` in a secret's hosts: the value goes into HTTP requests to the host's
// services (`network.hostPorts`), every listed port or only the ports named with it.
import { HOST_PATTERN } from "./schema-checks.js";

/** `host.sandbox.internal` (every host port) or `host.sandbox.internal:<port>` (that port only). */
export const HOST_SERVICE_SECRET_HOST = /^host\.sandbox\.internal(?::([1-9][0-9]{0,4}))?$/i;

/** True when a secret's `hosts` entry names the host's services rather than an HTTP(S) host. */
export function isHostServiceEntry(host: string): boolean {
  return HOST_SERVICE_SECRET_HOST.test(host);
}

/**
 * The host ports a secret with `hosts` is sent to, of `hostPorts`: all of them for
 * `host.sandbox.internal`, the named ones for `host.sandbox.internal:<port>`; empty when the
 * secret names no host service. In the order of `hostPorts`.
 */
export function secretHostPorts(hosts: readonly string[], hostPorts: readonly number[]): number[] {
  const named = new Set<number>();
  let all = false;
  for (const host of hosts) {
    const match = HOST_SERVICE_SECRET_HOST.exec(host);
    if (!match) continue;
    if (match[1] === undefined) all = true;
    else named.add(Number(match[1]));
  }
  return hostPorts.filter((port) => all || named.has(port));
}

/** A secret's `hosts` without its host-service entries: the HTTP(S) hosts it is sent to. */
export function secretHttpHosts(hosts: readonly string[]): string[] {
  return hosts.filter((host) => !isHostServiceEntry(host));
}

/** What a secret's `hosts` entry may be: a host pattern, or `host.sandbox.internal:<port>`. */
export const SECRET_HOST_PATTERN = new RegExp(`${HOST_PATTERN.source}|^host\\.sandbox\\.internal:[1-9][0-9]{0,4}$`);
