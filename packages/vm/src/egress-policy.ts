import type { DnsOptions, HttpHooks } from "@earendil-works/gondolin";
import type { GondolinModule } from "./gondolin-loader.js";

/**
 * The guest's way out, as Gondolin options. Everything the guest sends goes through Gondolin's
 * userspace network stack on the host, which:
 * - answers DNS itself (synthetic mode, pinned here): every A query gets 192.0.2.1, AAAA
 *   2001:db8::1, `localhost` 127.0.0.1; nothing is forwarded to a resolver;
 * - drops UDP to any port but 53 (and 67, its DHCP server), IPv6, and frames other than IPv4 and ARP;
 * - accepts TCP handshakes to any address, then lets a flow through only if its first bytes are
 *   an HTTP request or a TLS ClientHello (terminated with a per-disk MITM CA); anything else is
 *   reset before a host socket exists. No `tcp` or `ssh` egress options are passed, so no raw TCP
 *   or SSH flow is ever mapped to the host;
 * - sends each HTTP(S) request to the host named in its URL/Host header (not to the address the
 *   guest dialled) if that name is on the allow-list and, unless it is on `allowedInternalHosts`,
 *   resolves to a public address (no loopback, private, link-local — 169.254.169.254 — or CGNAT).
 */
export interface EgressPolicy {
  /** Gondolin's HTTP hooks. */
  httpHooks: HttpHooks;
  /** Environment for guest processes (secret placeholders; none today). */
  env: Record<string, string>;
  /** Gondolin's DNS options. */
  dns: DnsOptions;
}

/** Host patterns of an {@link EgressPolicy}. */
export interface EgressPolicyOptions {
  /** Host patterns the guest may reach over HTTP(S); `*` wildcards; empty = nothing. */
  allowedHosts: readonly string[];
  /** Allowed patterns that may also resolve to internal addresses (e.g. a host-side test server). */
  allowedInternalHosts?: readonly string[];
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
  return { httpHooks: policy.httpHooks, env: policy.env, dns: { mode: "synthetic" } };
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
