// DNS-rebinding guard: a web page on evil.example can point its own name at 127.0.0.1 and then
// read our previews as "same origin". The browser still sends `Host: evil.example:<port>`, so only
// loopback names for the exact listener port are accepted.

const loopbackHosts = new Set(["127.0.0.1", "localhost", "[::1]"]);

/** True when `host` (a `Host` header value) names this listener: `127.0.0.1:P`, `localhost:P` or `[::1]:P`. */
export function isAllowedHost(host: string | undefined, port: number): boolean {
  if (host === undefined) return false;
  const value = host.trim().toLowerCase();
  const colon = value.lastIndexOf(":");
  if (colon <= 0) return false;
  const name = value.slice(0, colon);
  const portText = value.slice(colon + 1);
  return loopbackHosts.has(name) && /^[0-9]{1,5}$/.test(portText) && Number(portText) === port;
}

/** True when `origin` (an `Origin` header value) is an `http://` loopback origin on any port. */
export function isLoopbackOrigin(origin: string): boolean {
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return false;
  }
  return url.protocol === "http:" && loopbackHosts.has(url.hostname);
}
