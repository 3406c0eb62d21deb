// DNS-rebinding guard: a web page on evil.example can point its own name at 127.0.0.1 and then
// read our previews as "same origin". The browser still sends `Host: evil.example:<port>`, so only
// the listener's own address (127.0.0.1, or the instance's 127.x.y.z) and exact port are accepted.
//
// Origin guard: the guest serves the pages of its previews, and the guest may be hostile. A page
// of one instance's preview must not drive another instance's preview (a Jupyter or code-server
// terminal) or other local apps through the browser, and browsers apply no same-origin policy to
// WebSockets or to form posts. So WebSockets and state-changing requests are accepted only from
// the previews of the same instance.

/** The address previews bind when none is given, and the only one a macOS loopback has by default. */
export const DEFAULT_PREVIEW_ADDRESS = "127.0.0.1";

/** A dotted IPv4 address in 127.0.0.0/8 with no leading zeros (`127.0.0.1`, `127.4.5.6`). */
const loopbackV4 =
  /^127\.(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])$/;

/** True for a dotted IPv4 address in 127.0.0.0/8, the addresses a preview may bind. */
export function isLoopbackV4(address: string): boolean {
  return loopbackV4.test(address);
}

/**
 * The `Host` names that reach a listener on `address`: only the address itself, except on the
 * shared `127.0.0.1`, where `localhost` and `[::1]` are accepted as before. A name like
 * `localhost` never reaches a listener on another loopback address, so it is not accepted there.
 */
export function previewHostNames(address: string): ReadonlySet<string> {
  return address === DEFAULT_PREVIEW_ADDRESS ? new Set([address, "localhost", "[::1]"]) : new Set([address]);
}

/** Splits `name:port` (a `Host` header value) into its lowercased name and port; undefined without a port. */
function splitHost(host: string): { name: string; port: number } | undefined {
  const value = host.trim().toLowerCase();
  const colon = value.lastIndexOf(":");
  if (colon <= 0) return undefined;
  const portText = value.slice(colon + 1);
  if (!/^[0-9]{1,5}$/.test(portText)) return undefined;
  return { name: value.slice(0, colon), port: Number(portText) };
}

/**
 * True when `host` (a `Host` header value) names this listener: `<address>:P`, where P is the
 * listener's port (on `127.0.0.1` also `localhost:P` and `[::1]:P`).
 */
export function isAllowedHost(host: string | undefined, port: number, address = DEFAULT_PREVIEW_ADDRESS): boolean {
  if (host === undefined) return false;
  const parsed = splitHost(host);
  return parsed !== undefined && parsed.port === port && previewHostNames(address).has(parsed.name);
}

const loopbackOriginPattern = /^http:\/\/(127(?:\.[0-9]{1,3}){3}|localhost|\[::1\])(?::([0-9]{1,5}))?$/;

/** The host and port of a page's origin, as the Origin guard compares them. */
export interface LoopbackOrigin {
  /** Lowercased: a 127/8 address, `localhost` or `[::1]`. */
  host: string;
  /** The port (80 when the origin names none). */
  port: number;
}

/**
 * The host and port of an `http://` loopback origin (`http://127.x.y.z:P`, `localhost:P`,
 * `[::1]:P`; port 80 when none is given), undefined for anything else: other schemes or names,
 * `null`, paths.
 */
export function parseLoopbackOrigin(origin: string): LoopbackOrigin | undefined {
  const match = loopbackOriginPattern.exec(origin.trim().toLowerCase());
  if (!match) return undefined;
  const host = match[1]!;
  if (host.startsWith("127.") && !isLoopbackV4(host)) return undefined;
  const port = match[2] === undefined ? 80 : Number(match[2]);
  return port >= 1 && port <= 65535 ? { host, port } : undefined;
}

/** True when `origin` (an `Origin` header value) is an `http://` loopback origin on any port. */
export function isLoopbackOrigin(origin: string): boolean {
  return parseLoopbackOrigin(origin) !== undefined;
}

/** Methods a browser may send cross-site without preflight that must not change state. */
const safeMethods = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * Why a request must be refused as coming from a page outside this instance, or undefined to let
 * it through. Applies to every WebSocket upgrade and to HTTP requests other than GET, HEAD and
 * OPTIONS. An `Origin` passes when `isInstanceOrigin` says its host and port are this
 * preview's or another open preview's of the same instance; with no `Origin`, a request passes
 * unless `Sec-Fetch-Site` says the browser sent it from another site. Requests from non-browser
 * clients carry neither and pass.
 */
export function crossOriginRefusal(
  request: { method: string; origin: string | undefined; fetchSite: string | undefined; upgrade: boolean },
  isInstanceOrigin: (origin: LoopbackOrigin) => boolean,
): string | undefined {
  if (!request.upgrade && safeMethods.has(request.method.toUpperCase())) return undefined;
  const what = request.upgrade ? "WebSocket" : request.method;
  if (request.origin !== undefined) {
    const origin = parseLoopbackOrigin(request.origin);
    if (origin !== undefined && isInstanceOrigin(origin)) return undefined;
    return `${what} from page origin ${JSON.stringify(request.origin)}`;
  }
  if (request.fetchSite?.trim().toLowerCase() === "cross-site") {
    return `${what} sent by a page of another site (Sec-Fetch-Site: cross-site)`;
  }
  return undefined;
}
