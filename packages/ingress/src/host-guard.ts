// DNS-rebinding guard: a web page on evil.example can point its own name at 127.0.0.1 and then
// read our previews as "same origin". The browser still sends `Host: evil.example:<port>`, so only
// loopback names for the exact listener port are accepted.
//
// Origin guard: the guest serves the pages of its previews, and the guest may be hostile. A page
// of one instance's preview must not drive another instance's preview (a Jupyter or code-server
// terminal) or other local apps through the browser, and browsers apply no same-origin policy to
// WebSockets or to form posts. So WebSockets and state-changing requests are accepted only from
// the previews of the same instance.

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

const loopbackOrigin = /^http:\/\/(127\.0\.0\.1|localhost|\[::1\])(?::([0-9]{1,5}))?$/;

/**
 * The port of an `http://` loopback origin (`http://127.0.0.1:P`, `localhost:P`, `[::1]:P`; 80
 * when none is given), undefined for anything else: other schemes or names, `null`, paths.
 */
export function loopbackOriginPort(origin: string): number | undefined {
  const match = loopbackOrigin.exec(origin.trim().toLowerCase());
  if (!match) return undefined;
  const port = match[2] === undefined ? 80 : Number(match[2]);
  return port >= 1 && port <= 65535 ? port : undefined;
}

/** True when `origin` (an `Origin` header value) is an `http://` loopback origin on any port. */
export function isLoopbackOrigin(origin: string): boolean {
  return loopbackOriginPort(origin) !== undefined;
}

/** Methods a browser may send cross-site without preflight that must not change state. */
const safeMethods = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * Why a request must be refused as coming from a page outside this instance, or undefined to let
 * it through. Applies to every WebSocket upgrade and to HTTP requests other than GET, HEAD and
 * OPTIONS. An `Origin` passes when it is a loopback origin on one of `instancePorts` (this
 * preview's and the other open previews of the same instance); with no `Origin`, a request passes
 * unless `Sec-Fetch-Site` says the browser sent it from another site. Requests from non-browser
 * clients carry neither and pass.
 */
export function crossOriginRefusal(
  request: { method: string; origin: string | undefined; fetchSite: string | undefined; upgrade: boolean },
  isInstancePort: (port: number) => boolean,
): string | undefined {
  if (!request.upgrade && safeMethods.has(request.method.toUpperCase())) return undefined;
  const what = request.upgrade ? "WebSocket" : request.method;
  if (request.origin !== undefined) {
    const port = loopbackOriginPort(request.origin);
    if (port !== undefined && isInstancePort(port)) return undefined;
    return `${what} from page origin ${JSON.stringify(request.origin)}`;
  }
  if (request.fetchSite?.trim().toLowerCase() === "cross-site") {
    return `${what} sent by a page of another site (Sec-Fetch-Site: cross-site)`;
  }
  return undefined;
}
