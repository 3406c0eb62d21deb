import type { DnsOptions, HttpHooks, TcpOptions } from "@earendil-works/gondolin";
import { HOST_SERVICES_HOSTNAME, secretHttpHosts } from "@pi-sandbox/config";
import { VmError, messageOf } from "./errors.js";
import type { GondolinModule } from "./gondolin-loader.js";
import type { VmSecret } from "./vm-types.js";

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
 * With `secrets`, Gondolin's own substitution (`createHttpHooks({ secrets })`): the guest's
 * environment holds each placeholder, and in every request the host replaces a placeholder in a
 * header (also inside a Basic `Authorization`) with the value if the request's host matches the
 * secret's hosts, and refuses the request (it never leaves the host) if not. A request that
 * carries the value itself to another host is refused too. URLs and bodies are left alone.
 *
 * A secret that lists `host.sandbox.internal` (every host port) or `host.sandbox.internal:<port>`
 * goes to those host ports through the HTTP/1.1 proxies of `HostPortProxies`
 * (host-port-proxy.ts): `tcp.hosts` maps such a port to its proxy's loopback port, which puts the
 * value in place of the placeholder in the request headers and forwards to `127.0.0.1:<port>`.
 * Gondolin gets only the secret's other hosts. A placeholder sent to a host port the secret does
 * not list passes unchanged; host ports no secret lists stay raw TCP.
 */
export interface EgressPolicy {
  /** Gondolin's HTTP hooks. */
  httpHooks: HttpHooks;
  /** Environment for guest processes: each secret's name with its placeholder. */
  env: Record<string, string>;
  /** Replaces a secret's value from now on (VM_SECRET_INVALID for an unknown name or bad value). */
  updateSecret(name: string, value: string): void;
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
  /** Puts a new value in from now on. */
  updateSecret(name: string, value: string): void;
  /** Stops the proxies. */
  close(): Promise<void>;
}

/** Host patterns of an {@link EgressPolicy}. */
export interface EgressPolicyOptions {
  /** Host patterns the guest may reach over HTTP(S); `*` wildcards; empty = nothing. */
  allowedHosts: readonly string[];
  /** Allowed patterns that may also resolve to internal addresses (e.g. a host-side test server). */
  allowedInternalHosts?: readonly string[];
  /** Host `127.0.0.1` ports the guest reaches over TCP as `host.sandbox.internal:<port>`; empty = none. */
  hostPorts?: readonly number[];
  /** Credentials by guest environment variable name (see {@link VmSecret}). */
  secrets?: Readonly<Record<string, VmSecret>>;
  /** The proxies of the host ports a secret is sent to (`HostPortProxies.open`), if any. */
  proxies?: HostPortProxyHandle;
}

/** Builds the policy with Gondolin's `createHttpHooks`, plus the name check described below. */
export function egressPolicy(
  gondolin: Pick<GondolinModule, "createHttpHooks">,
  options: EgressPolicyOptions,
): EgressPolicy {
  let allowed: readonly string[] = [];
  const secrets = checkedSecrets(options.secrets ?? {});
  let policy: ReturnType<GondolinModule["createHttpHooks"]>;
  try {
    policy = gondolin.createHttpHooks({
      allowedHosts: [...options.allowedHosts],
      ...(options.allowedInternalHosts ? { allowedInternalHosts: [...options.allowedInternalHosts] } : {}),
      ...(Object.keys(secrets).length > 0 ? { secrets: gondolinSecrets(secrets) } : {}),
      // Gondolin 0.12 resolves a request's host name with the host's resolver *before* it matches
      // the name against the list (both happen in isIpAllowed), so any name a guest writes into a
      // Host header or a URL would be looked up on the host: a DNS channel out of the sandbox. This
      // check runs first and refuses a name off the list before any lookup.
      isRequestAllowed: (request) => isHostAllowed(new URL(request.url).hostname, allowed),
    });
  } catch (error) {
    // Gondolin's messages name a placeholder at most, never a value; keep only the secret's name.
    throw new VmError("VM_SECRET_INVALID", `the secrets could not be set up: ${messageOf(error)}`, {
      details: { secrets: Object.keys(secrets) },
    });
  }
  allowed = policy.allowedHosts;
  const manager = policy.secretManager;
  const updateSecret = (name: string, value: string): void => {
    if (!Object.hasOwn(secrets, name)) {
      throw new VmError("VM_SECRET_INVALID", `no secret named ${name} was given to this VM`, {
        details: { secret: name },
      });
    }
    checkValue(name, value);
    try {
      manager.updateSecret(name, { value });
    } catch (error) {
      throw new VmError("VM_SECRET_INVALID", `secret ${name} could not be updated: ${messageOf(error)}`, {
        details: { secret: name },
      });
    }
    options.proxies?.updateSecret(name, value);
  };
  const proxies = options.proxies;
  const close = async (): Promise<void> => proxies?.close();
  const tcp = hostPortsTcp(options.hostPorts ?? [], proxies?.targets());
  if (!tcp) return { httpHooks: policy.httpHooks, env: policy.env, updateSecret, dns: { mode: "synthetic" }, close };
  return {
    httpHooks: policy.httpHooks,
    env: policy.env,
    updateSecret,
    dns: { mode: "synthetic", syntheticHostMapping: "per-host" },
    tcp,
    close,
  };
}

/** The secrets as Gondolin gets them: only their HTTP(S) hosts (host ports go through the proxies). */
function gondolinSecrets(
  secrets: Record<string, { hosts: string[]; value: string; placeholder: string }>,
): Record<string, { hosts: string[]; value: string; placeholder: string }> {
  return Object.fromEntries(
    Object.entries(secrets).map(([name, secret]) => [name, { ...secret, hosts: secretHttpHosts(secret.hosts) }]),
  );
}

const SECRET_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Gondolin's secret definitions, after this package's own checks (Gondolin checks placeholders). */
function checkedSecrets(
  secrets: Readonly<Record<string, VmSecret>>,
): Record<string, { hosts: string[]; value: string; placeholder: string }> {
  const out: Record<string, { hosts: string[]; value: string; placeholder: string }> = {};
  for (const [name, secret] of Object.entries(secrets)) {
    if (!SECRET_NAME.test(name)) {
      throw new VmError(
        "VM_SECRET_INVALID",
        `secret name ${JSON.stringify(name)} is not an environment variable name`,
        {
          details: { secret: name },
        },
      );
    }
    checkValue(name, secret.value);
    if (!secret.placeholder || secret.placeholder === secret.value || /[\r\n\0]/.test(secret.placeholder)) {
      throw new VmError(
        "VM_SECRET_INVALID",
        `secret ${name} needs a placeholder of one line that differs from its value`,
        {
          details: { secret: name },
        },
      );
    }
    if (secret.hosts.length === 0) {
      throw new VmError("VM_SECRET_INVALID", `secret ${name} lists no host to send it to`, {
        details: { secret: name },
      });
    }
    out[name] = { hosts: [...secret.hosts], value: secret.value, placeholder: secret.placeholder };
  }
  return out;
}

/** A value goes into HTTP headers: it must be non-empty and one line. Messages never quote it. */
function checkValue(name: string, value: string): void {
  if (typeof value !== "string" || value === "") {
    throw new VmError("VM_SECRET_INVALID", `secret ${name} is empty`, { details: { secret: name } });
  }
  if (/[\r\n\0]/.test(value)) {
    throw new VmError("VM_SECRET_INVALID", `secret ${name} contains a line break or NUL, which no header can carry`, {
      details: { secret: name },
    });
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
