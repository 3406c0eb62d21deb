import type { DnsOptions, HttpHooks, TcpOptions } from "@earendil-works/gondolin";
import { HOST_SERVICES_HOSTNAME } from "@pi-sandbox/config";
import { VmError } from "./errors.js";
import type { GondolinModule } from "./gondolin-loader.js";

/**
 * The guest's way out, as Gondolin options. Everything the guest sends goes through Gondolin's
 * userspace network stack on the host, which:
 * - answers DNS itself (synthetic mode, pinned here): every A query gets 192.0.2.1, AAAA
 *   2001:db8::1, `localhost` 127.0.0.1; nothing is forwarded to a resolver;
 * - drops UDP to any port but 53 (and 67, its DHCP server), IPv6, and frames other than IPv4 and ARP;
 * - accepts TCP handshakes to any address, then lets a flow through only if its first bytes are
 *   an HTTP request or a TLS ClientHello (terminated with a per-disk MITM CA); anything else is
 *   reset before a host socket exists. No `ssh` egress option is passed, and `tcp` only for
 *   `hostPorts` (below), so no other raw TCP or SSH flow is ever mapped to the host;
 * - sends each HTTP(S) request to the host named in its URL/Host header (not to the address the
 *   guest dialled) if that name is on the allow-list and, unless it is on `allowedInternalHosts`,
 *   resolves to a public address (no loopback, private, link-local — 169.254.169.254 — or CGNAT).
 *
 * With `hostPorts`, Gondolin's explicit host-mapped TCP egress maps `host.sandbox.internal:<port>`
 * to the host's `127.0.0.1:<port>` for exactly those ports. Gondolin matches a flow by the name its
 * synthetic DNS gave the dialled address, so DNS switches to one synthetic address per name
 * (`syntheticHostMapping: "per-host"`, 198.19.x.y; Gondolin requires it for `tcp`); only then. A
 * mapped flow skips the HTTP/TLS sniffing and passes raw bytes both ways. Every other name, port
 * and address is handled exactly as without it.
 */
export interface EgressPolicy {
  /** Gondolin's HTTP hooks. */
  httpHooks: HttpHooks;
  /** Environment for guest processes (secret placeholders; none today). */
  env: Record<string, string>;
  /** Gondolin's DNS options. */
  dns: DnsOptions;
  /** Gondolin's host-mapped TCP egress: present only with `hostPorts`. */
  tcp?: TcpOptions;
}

/** Host patterns of an {@link EgressPolicy}. */
export interface EgressPolicyOptions {
  /** Host patterns the guest may reach over HTTP(S); `*` wildcards; empty = nothing. */
  allowedHosts: readonly string[];
  /** Allowed patterns that may also resolve to internal addresses (e.g. a host-side test server). */
  allowedInternalHosts?: readonly string[];
  /** Host `127.0.0.1` ports the guest reaches over TCP as `host.sandbox.internal:<port>`; empty = none. */
  hostPorts?: readonly number[];
}

/** Builds the policy with Gondolin's `createHttpHooks`, plus the name check described below. */
export function egressPolicy(
  gondolin: Pick<GondolinModule, "createHttpHooks">,
  options: EgressPolicyOptions,
): EgressPolicy {
  let allowed: readonly string[] = [];
  const policy = gondolin.createHttpHooks({
    allowedHosts: [...options.allowedHosts],
    ...(options.allowedInternalHosts ? { allowedInternalHosts: [...options.allowedInternalHosts] } : {}),
    // Gondolin 0.12 resolves a request's host name with the host's resolver *before* it matches
    // the name against the list (both happen in isIpAllowed), so any name a guest writes into a
    // Host header or a URL would be looked up on the host: a DNS channel out of the sandbox. This
    // check runs first and refuses a name off the list before any lookup.
    isRequestAllowed: (request) => isHostAllowed(new URL(request.url).hostname, allowed),
  });
  allowed = policy.allowedHosts;
  const tcp = hostPortsTcp(options.hostPorts ?? []);
  if (!tcp) return { httpHooks: policy.httpHooks, env: policy.env, dns: { mode: "synthetic" } };
  return {
    httpHooks: policy.httpHooks,
    env: policy.env,
    dns: { mode: "synthetic", syntheticHostMapping: "per-host" },
    tcp,
  };
}

/**
 * Gondolin's `tcp.hosts` for host ports: `host.sandbox.internal:<port>` → `127.0.0.1:<port>`, each
 * key with its port (a key without one would map every port of the name). Undefined for none.
 * Refuses anything but unique whole ports 1-65535 (the config checks this too; this is the VM's
 * own guard, since a bad entry would open something other than what was asked).
 */
export function hostPortsTcp(hostPorts: readonly number[]): TcpOptions | undefined {
  if (hostPorts.length === 0) return undefined;
  const hosts: Record<string, string> = {};
  for (const port of hostPorts) {
    const key = `${HOST_SERVICES_HOSTNAME}:${port}`;
    if (!Number.isInteger(port) || port < 1 || port > 65535 || key in hosts) {
      throw new VmError(
        "VM_RESOURCES_UNSUPPORTED",
        `network.hostPorts must hold unique whole port numbers between 1 and 65535; got ${JSON.stringify(hostPorts)}`,
        { details: { hostPorts: [...hostPorts] } },
      );
    }
    hosts[key] = `127.0.0.1:${port}`;
  }
  return { hosts };
}

/** Gondolin's own matching (`host/patterns.js`, not exported): `*` alone or as a wildcard, case-insensitive. */
export function isHostAllowed(hostname: string, patterns: readonly string[]): boolean {
  const name = hostname.toLowerCase();
  return patterns.some((pattern) => {
    if (!pattern) return false;
    if (pattern === "*") return true;
    const regex = pattern
      .split("*")
      .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&"))
      .join(".*");
    return new RegExp(`^${regex}$`, "i").test(name);
  });
}
