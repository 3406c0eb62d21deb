// The guest's way out as Gondolin options: synthetic DNS, HTTP(S) to allowed hosts only, TCP to
// listed host ports, secrets substituted on the host.
import type { DnsOptions, HttpHooks, TcpOptions } from "@earendil-works/gondolin";
import { ENV_NAME_PATTERN, HOST_SERVICES_HOSTNAME, secretHttpHosts } from "@pi-sandbox/config";
import { VmError } from "../errors.js";
import type { GondolinModule } from "../gondolin-loader.js";
import { isHostAllowed } from "./host-patterns.js";
import { countingFetch, type EgressBytes, type HopFetch } from "./counting-fetch.js";
import { createSecretFetch, type UpstreamOverrides } from "./secret-fetch.js";
import { SecretStore, httpsDestination, placeSecrets } from "./secret-rules.js";
import { guardedFetch } from "./upstream-dispatchers.js";

export { isHostAllowed };

/** One credential of `VmSpec`: the value stays on the host. */
export interface VmSecret {
  /** The real value: non-empty, no line break or NUL. */
  value: string;
  /** What the guest sees instead; unique, not inside another placeholder, never equal to the value. */
  placeholder: string;
  /**
   * Host patterns (Gondolin's matching: `*` wildcards) whose requests get the value; also
   * `host.sandbox.internal` (every `hostPorts` port) or `host.sandbox.internal:<port>` (that one),
   * whose HTTP requests then go through a proxy on the host that puts the value in.
   */
  hosts: readonly string[];
  /**
   * Header names (any case) the value may go into besides `authorization`, `x-api-key` and
   * `proxy-authorization`, e.g. `x-goog-api-key`. Default none.
   */
  headers?: readonly string[];
}

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
 *
 * With `secrets`, the guest's environment holds each placeholder, and the value goes only into a
 * credential header (`authorization`, `x-api-key`, `proxy-authorization`, and the secret's own
 * `headers`) of a request over HTTPS to port 443 of one of the secret's hosts (secret-rules.ts).
 * `isRequestAllowed` refuses (403, before anything leaves the host) a request whose head holds a
 * placeholder or value anywhere else: another header, the URL, another host, plain HTTP, another
 * port. The substitution and the scrubbing of every response (its value, in any of the forms
 * secret-scrubber.ts knows, becomes the placeholder again) happen in the `fetch` given to Gondolin
 * (secret-fetch.ts), which keeps responses streaming. Bodies are never substituted: a placeholder
 * in a body reaches the server as written. WebSocket handshakes bypass that fetch: they get no
 * value (a placeholder in one passes as it is), so nothing comes back to scrub.
 *
 * With `onEvent`, every request hop also goes through counting-fetch.ts, which reports the bytes
 * of its bodies each way once the exchange ends; without secrets the fetch under it is undici's
 * through the same address guard as Gondolin's own (upstream-dispatchers.ts).
 *
 * A secret that lists `host.sandbox.internal` (every host port) or `host.sandbox.internal:<port>`
 * goes to those host ports through the HTTP/1.1 proxies of `HostPortProxies`
 * (host-port-proxy.ts): `tcp.hosts` maps such a port to its proxy's loopback port, which applies
 * the same header rules over plain HTTP (the one exception to HTTPS), scrubs the responses, and
 * forwards to `127.0.0.1:<port>`. Host ports no secret lists stay raw TCP.
 */
export interface EgressPolicy {
  /** Gondolin's HTTP hooks. */
  httpHooks: HttpHooks;
  /** Gondolin's `fetch` (counting; substitution and scrubbing): present only with secrets or `onEvent`. */
  fetch?: HopFetch;
  /** Environment for guest processes: each secret's name with its placeholder. */
  env: Record<string, string>;
  /**
   * Replaces a secret's value from now on, and with `placeholder` adds the placeholder the guest
   * now sends (earlier ones keep working); VM_SECRET_INVALID for an unknown name or bad value.
   */
  updateSecret(name: string, value: string, placeholder?: string): void;
  /** Gondolin's DNS options. */
  dns: DnsOptions;
  /** Gondolin's host-mapped TCP egress: present only with `hostPorts`. */
  tcp?: TcpOptions;
  /** Closes the host-port proxies, if any (the VM's end). */
  close(): Promise<void>;
}

/** What the policy needs of the host-port proxies (`HostPortProxies`). */
export interface HostPortProxyHandle {
  /** Host port → the loopback port of its proxy. */
  targets(): ReadonlyMap<number, number>;
  /** Stops the proxies. */
  close(): Promise<void>;
}

/** An HTTP(S) request of the guest as the policy decides it: where it goes, never its headers or body. */
export interface EgressRequest {
  /** The host name the request names (its URL or Host header; an IP literal as written), lower case. */
  host: string;
  port: number;
  protocol: "http" | "https";
  method: string;
}

/** Why an approver let a request through or not. */
export type EgressApprovalRule =
  /** The user allowed the host for this instance (now or earlier). */
  | "approved for this instance"
  /** The user allowed this one request. */
  | "approved once"
  /** The user said no. */
  | "denied by the user"
  /** Nobody who could answer was there: refused at once. */
  | "nobody to ask"
  /** Nobody answered in time. */
  | "no answer in time"
  /** So many other hosts wait for an answer already that this one is not asked about. */
  | "too many waiting"
  /** Not a host a user could be asked about (no plain name or address): refused as without an approver. */
  | "not in allowedHosts";

/** An approver's answer about one request. */
export interface EgressVerdict {
  allowed: boolean;
  rule: EgressApprovalRule;
}

/**
 * Asked about each request to a host off `allowedHosts`; the request is held until the promise
 * settles (the approver bounds the wait). A rejection counts as a refusal.
 */
export type EgressApprover = (request: EgressRequest) => Promise<EgressVerdict>;

/**
 * What the guest's way out did, for the caller's record: each HTTP(S) request's decision (`rule`
 * says why), each secret put into a request (its name and the host; never the value), and the
 * body bytes each way of each allowed request hop once it ends (see `EgressBytes`).
 */
export type EgressEvent =
  | (EgressRequest & {
      kind: "request";
      allowed: boolean;
      rule: "allowedHosts" | "not in allowedHosts" | "secret rules" | EgressApprovalRule;
    })
  | { kind: "secret"; secret: string; host: string }
  | ({ kind: "bytes" } & EgressBytes);

type EgressEventRule = Extract<EgressEvent, { kind: "request" }>["rule"];

/** Host patterns of an {@link EgressPolicy}. */
export interface EgressPolicyOptions {
  /** Told of every decision and secret use (see {@link EgressEvent}); must not throw or block. */
  onEvent?: (event: EgressEvent) => void;
  /** Asked about requests to hosts off `allowedHosts` (see {@link EgressApprover}); absent: refused at once. */
  approve?: EgressApprover;
  /** Host patterns the guest may reach over HTTP(S); `*` wildcards; empty = nothing. */
  allowedHosts: readonly string[];
  /** Allowed patterns that may also resolve to internal addresses (e.g. a host-side test server). */
  allowedInternalHosts?: readonly string[];
  /** Host `127.0.0.1` ports the guest reaches over TCP as `host.sandbox.internal:<port>`; empty = none. */
  hostPorts?: readonly number[];
  /** Credentials by guest environment variable name (see {@link VmSecret}). */
  secrets?: Readonly<Record<string, VmSecret>>;
  /** The secrets as held for the host-port proxies too (default: made from `secrets`). */
  store?: SecretStore;
  /** The proxies of the host ports a secret is sent to (`HostPortProxies.open`), if any. */
  proxies?: HostPortProxyHandle;
  /** Test seam: how the host reaches HTTPS upstreams (see `UpstreamOverrides`). */
  upstream?: UpstreamOverrides;
}

/** Builds the policy with Gondolin's `createHttpHooks`, plus the checks described above. */
export function egressPolicy(
  gondolin: Pick<GondolinModule, "createHttpHooks">,
  options: EgressPolicyOptions,
): EgressPolicy {
  const store = options.store ?? secretStore(options.secrets ?? {});
  const allowed = [...options.allowedHosts, ...(options.allowedInternalHosts ?? [])];
  // Names the approver let through at least once in this run (lower case): Gondolin's address
  // check below passes them too. Each request is still decided by isRequestAllowed first.
  const approved = new Set<string>();
  const decideHost = async (request: EgressRequest): Promise<{ ok: boolean; rule: EgressEventRule }> => {
    if (isHostAllowed(request.host, allowed)) return { ok: true, rule: "allowedHosts" };
    if (!options.approve) return { ok: false, rule: "not in allowedHosts" };
    const verdict = await options
      .approve(request)
      .catch((): EgressVerdict => ({ allowed: false, rule: "no answer in time" }));
    if (verdict.allowed) approved.add(request.host);
    return { ok: verdict.allowed, rule: verdict.rule };
  };
  const policy = gondolin.createHttpHooks({
    // The host list is ours (isRequestAllowed, then isIpAllowed below), so that the hosts a user
    // approves while the VM runs pass too; Gondolin still refuses internal addresses unless the
    // name is on allowedInternalHosts.
    allowedHosts: ["*"],
    ...(options.allowedInternalHosts ? { allowedInternalHosts: [...options.allowedInternalHosts] } : {}),
    isIpAllowed: (info) => isHostAllowed(info.hostname, allowed) || approved.has(info.hostname.toLowerCase()),
    // Gondolin 0.12 resolves a request's host name with the host's resolver *before* it matches
    // the name against the list (both happen in isIpAllowed), so any name a guest writes into a
    // Host header or a URL would be looked up on the host: a DNS channel out of the sandbox. This
    // check runs first and refuses a name off the list (or holds it for the approver) before any
    // lookup; then the secret rules. An IP literal is a name like any other here.
    isRequestAllowed: async (request) => {
      const url = new URL(request.url);
      const asked: EgressRequest = {
        host: url.hostname.toLowerCase(),
        port: Number(url.port || (url.protocol === "https:" ? 443 : 80)),
        protocol: url.protocol === "https:" ? "https" : "http",
        method: request.method,
      };
      const host = await decideHost(asked);
      const ok =
        host.ok && placeSecrets({ url: request.url, headers: request.headers }, store.all(), httpsDestination).ok;
      options.onEvent?.({ kind: "request", ...asked, allowed: ok, rule: host.ok && !ok ? "secret rules" : host.rule });
      return ok;
    },
  });
  const env = Object.fromEntries(store.all().map((secret) => [secret.name, secret.placeholder]));
  const updateSecret = (name: string, value: string, placeholder?: string): void => {
    const held = store.get(name);
    if (!held) {
      throw new VmError("VM_SECRET_INVALID", `no secret named ${name} was given to this VM`, {
        details: { secret: name },
      });
    }
    const next = placeholder ?? held.placeholder;
    checkValue(name, value, next);
    for (const old of [held.placeholder, ...held.aliases]) checkValue(name, value, old);
    if (next !== held.placeholder) checkPlaceholder(name, next, store);
    store.update(name, value, next);
  };
  const isIpAllowed = policy.httpHooks.isIpAllowed!;
  const onEvent = options.onEvent;
  const upstreamFetch = !store.empty
    ? createSecretFetch({
        store,
        isIpAllowed,
        ...(options.upstream ? { upstream: options.upstream } : {}),
        ...(onEvent ? { onUse: (use) => onEvent({ kind: "secret", ...use }) } : {}),
      })
    : onEvent
      ? guardedFetch(isIpAllowed)
      : undefined;
  const fetch =
    upstreamFetch && onEvent
      ? countingFetch(upstreamFetch.fetch, (bytes) => onEvent({ kind: "bytes", ...bytes }))
      : upstreamFetch?.fetch;
  const proxies = options.proxies;
  const close = async (): Promise<void> => {
    await Promise.all([proxies?.close(), upstreamFetch?.close()]);
  };
  const tcp = hostPortsTcp(options.hostPorts ?? [], proxies?.targets());
  return {
    httpHooks: policy.httpHooks,
    ...(fetch ? { fetch } : {}),
    env,
    updateSecret,
    dns: tcp ? { mode: "synthetic", syntheticHostMapping: "per-host" } : { mode: "synthetic" },
    ...(tcp ? { tcp } : {}),
    close,
  };
}

/**
 * The VM's secrets, checked (VM_SECRET_INVALID names the secret, never quotes a value): names,
 * values, placeholders (unique, none inside another), hosts, header names.
 */
export function secretStore(secrets: Readonly<Record<string, VmSecret>>): SecretStore {
  const store = new SecretStore();
  for (const [name, secret] of Object.entries(secrets)) {
    checkSecret(name, secret, store);
    store.add({
      name,
      placeholder: secret.placeholder,
      value: secret.value,
      httpHosts: secretHttpHosts(secret.hosts),
      ...(secret.headers ? { headers: secret.headers } : {}),
    });
  }
  return store;
}

/** An HTTP header name (RFC 9110 token). */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$/;

function invalid(name: string, message: string): VmError {
  return new VmError("VM_SECRET_INVALID", message, { details: { secret: name } });
}

function checkSecret(name: string, secret: VmSecret, store: SecretStore): void {
  if (!ENV_NAME_PATTERN.test(name)) {
    throw invalid(name, `secret name ${JSON.stringify(name)} is not an environment variable name`);
  }
  checkValue(name, secret.value, secret.placeholder);
  checkPlaceholder(name, secret.placeholder, store);
  if (secret.hosts.length === 0) throw invalid(name, `secret ${name} lists no host to send it to`);
  for (const header of secret.headers ?? []) {
    if (!HEADER_NAME.test(header)) {
      throw invalid(name, `secret ${name} lists ${JSON.stringify(header)} in headers, which is not a header name`);
    }
  }
}

/** A placeholder: one line, unique among the other secrets' (none inside another). */
function checkPlaceholder(name: string, placeholder: string, store: SecretStore): void {
  if (!placeholder || /[\r\n\0]/.test(placeholder)) {
    throw invalid(name, `secret ${name} needs a placeholder of one line that differs from its value`);
  }
  for (const other of store.all()) {
    if (other.name === name) continue;
    for (const taken of [other.placeholder, ...other.aliases]) {
      if (taken.includes(placeholder) || placeholder.includes(taken)) {
        throw invalid(name, `the placeholders of secrets ${other.name} and ${name} overlap; each must be unique`);
      }
    }
  }
}

/**
 * A value goes into HTTP headers: non-empty, one line, not its placeholder and not inside it (a
 * placeholder shaped from the credential must not carry it to the guest). Messages never quote it.
 */
function checkValue(name: string, value: string, placeholder: string): void {
  if (typeof value !== "string" || value === "") {
    throw new VmError("VM_SECRET_INVALID", `secret ${name} is empty`, { details: { secret: name } });
  }
  if (/[\r\n\0]/.test(value)) {
    throw new VmError("VM_SECRET_INVALID", `secret ${name} contains a line break or NUL, which no header can carry`, {
      details: { secret: name },
    });
  }
  if (value === placeholder || (value.length >= 8 && placeholder.includes(value))) {
    throw invalid(name, `secret ${name} needs a placeholder of one line that differs from its value`);
  }
}

/**
 * Gondolin's `tcp.hosts` for host ports: `host.sandbox.internal:<port>` → `127.0.0.1:<port>`, or
 * to the port of its proxy in `targets`; each key with its port (a key without one would map every
 * port of the name). Undefined for none.
 * Refuses anything but unique whole ports 1-65535 (the config checks this too; this is the VM's
 * own guard, since a bad entry would open something other than what was asked).
 */
export function hostPortsTcp(
  hostPorts: readonly number[],
  targets?: ReadonlyMap<number, number>,
): TcpOptions | undefined {
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
    hosts[key] = `127.0.0.1:${targets?.get(port) ?? port}`;
  }
  return { hosts };
}
