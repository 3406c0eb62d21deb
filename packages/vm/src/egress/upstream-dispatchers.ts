// How the host connects to the upstreams of the guest's HTTP(S) requests when the VM gives Gondolin
// a fetch of its own (secret-fetch.ts, guardedFetch below). Gondolin connects through a dispatcher
// that checks each resolved address against the policy (no DNS rebinding to an internal address)
// only with its own fetch; this builds the same guard from the policy's `isIpAllowed`, one
// connection pool per origin.
import dns, { type LookupAddress, type LookupAllOptions } from "node:dns";
import tls from "node:tls";
import type { HttpHooks } from "@earendil-works/gondolin";
import { Agent, fetch, type Dispatcher, type RequestInit, type Response } from "undici";

/** Upstream origins with a connection pool kept at once; the oldest is closed beyond it. */
const MAX_ORIGINS = 64;

/** Test seam: how the host reaches HTTPS upstreams (a host-side fake API). */
export interface UpstreamOverrides {
  /** A CA (PEM) trusted besides the system's. */
  ca?: string;
  /** Dial this port for an HTTPS request to port 443. */
  httpsPort?: number;
}

/** The connection pools of one VM's upstreams. */
export interface UpstreamDispatchers {
  /** The pool for `url`, whose addresses are checked as for `policyPort` (the port the guest named). */
  dispatcherFor(url: URL, policyPort: number): Dispatcher;
  /** Closes every upstream connection. */
  close(): Promise<void>;
}

/** Pools whose connections only reach addresses `isIpAllowed` lets through; `compose` wraps each. */
export function upstreamDispatchers(
  isIpAllowed: NonNullable<HttpHooks["isIpAllowed"]>,
  upstream?: UpstreamOverrides,
  compose?: Dispatcher.DispatcherComposeInterceptor,
): UpstreamDispatchers {
  const dispatchers = new Map<string, Dispatcher>();
  return {
    dispatcherFor(url, policyPort) {
      const key = `${url.protocol}//${url.hostname}:${url.port}`;
      let agent = dispatchers.get(key);
      if (!agent) {
        const protocol = url.protocol === "https:" ? "https" : "http";
        const lookup = guardedLookup({ hostname: url.hostname, port: policyPort, protocol }, isIpAllowed);
        const ca = upstream?.ca ? { ca: [...tls.rootCertificates, upstream.ca] } : {};
        const pool = new Agent({ connect: { lookup, ...ca } });
        agent = compose ? pool.compose(compose) : pool;
        dispatchers.set(key, agent);
        if (dispatchers.size > MAX_ORIGINS) {
          const [oldest, old] = dispatchers.entries().next().value!;
          dispatchers.delete(oldest);
          void old.close().catch(() => undefined);
        }
      }
      return agent;
    },
    async close() {
      const agents = [...dispatchers.values()];
      dispatchers.clear();
      await Promise.all(agents.map((agent) => agent.close().catch(() => undefined)));
    },
  };
}

/**
 * What Gondolin's own fetch does, for a VM without secrets that still gives Gondolin a fetch (to
 * count bytes, counting-fetch.ts): undici's fetch through the guarded pools.
 */
export function guardedFetch(isIpAllowed: NonNullable<HttpHooks["isIpAllowed"]>): {
  fetch: (input: string, init?: RequestInit) => Promise<Response>;
  close(): Promise<void>;
} {
  const pools = upstreamDispatchers(isIpAllowed);
  return {
    fetch: (input, init = {}) => {
      const url = new URL(input);
      const policyPort = Number(url.port || (url.protocol === "https:" ? 443 : 80));
      return fetch(url, { ...init, redirect: "manual", dispatcher: pools.dispatcherFor(url, policyPort) });
    },
    close: () => pools.close(),
  };
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for the upstream connection that keeps only the addresses the policy allows for
 * `info` (as Gondolin's own dispatcher does), so a name that resolves differently at connect time
 * cannot reach an internal address. Reads `dns.lookup` at each call (tests put in their own).
 */
export function guardedLookup(
  info: { hostname: string; port: number; protocol: "http" | "https" },
  isIpAllowed: NonNullable<HttpHooks["isIpAllowed"]>,
): (hostname: string, options: LookupAllOptions | { all?: boolean }, callback: LookupCallback) => void {
  return (hostname, lookupOptions, callback) => {
    const all = Boolean((lookupOptions as { all?: boolean }).all);
    dns.lookup(hostname, { ...lookupOptions, all: true }, (error, addresses) => {
      if (error) return callback(error, all ? [] : "", 4);
      void allowedAddresses(addresses, info, isIpAllowed).then(
        (allowed) => {
          if (allowed.length === 0) {
            const refused = Object.assign(new Error(`blocked by policy: ${info.hostname}`), { code: "EACCES" });
            return callback(refused, all ? [] : "", 4);
          }
          if (all) callback(null, allowed);
          else callback(null, allowed[0]!.address, allowed[0]!.family);
        },
        (failure: Error) => callback(failure, all ? [] : "", 4),
      );
    });
  };
}

async function allowedAddresses(
  addresses: LookupAddress[],
  info: { hostname: string; port: number; protocol: "http" | "https" },
  isIpAllowed: NonNullable<HttpHooks["isIpAllowed"]>,
): Promise<LookupAddress[]> {
  const allowed: LookupAddress[] = [];
  for (const entry of addresses) {
    const family = entry.family === 6 ? 6 : 4;
    if (await isIpAllowed({ ...info, ip: entry.address, family })) allowed.push({ address: entry.address, family });
  }
  return allowed;
}
