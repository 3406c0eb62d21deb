// Who may use the dashboard, decided per request before anything else runs: the same rules as
// previews (a Host of the loopback name and this port, against DNS rebinding), plus a session.
// A browser gets a session only by opening a link with a token minted from the private state
// root; it is kept in an HttpOnly, SameSite=Strict cookie. Requests that change something (any
// unsafe method) and WebSocket upgrades must carry this origin's Origin, so a page served by a
// guest (a preview) can neither act through the user's session nor open a socket to it.
import type { IncomingHttpHeaders } from "node:http";
import { verifyToken } from "./tokens.js";

/** What the guard looks at in a request. */
export interface GuardRequest {
  /** HTTP method. */
  method: string;
  /** The request target (`/api/state?x=1`). */
  url: string;
  /** The request's headers. */
  headers: IncomingHttpHeaders;
  /** A WebSocket (or other) upgrade request. */
  upgrade?: boolean;
}

/** What the guard knows of the dashboard. */
export interface GuardContext {
  /** The port the dashboard listens on. */
  port: number;
  /** Hex key the links' tokens are signed with. */
  key: string;
  /** Session ids handed out so far. */
  sessions: ReadonlySet<string>;
}

/** The guard's decision. */
export type GuardVerdict =
  /** Serve it. */
  | { kind: "allow" }
  /** A link with a valid token: start a session (set the cookie) and redirect to the token-free URL. */
  | { kind: "login"; location: string }
  /** 403, with the reason (for the log and the refusal page). */
  | { kind: "refuse"; reason: string };

const SAFE_METHODS = new Set(["GET", "HEAD"]);

/** The session cookie's name: per port, since browsers share cookies across a host's ports. */
export function sessionCookieName(port: number): string {
  return `pi_sandbox_dashboard_${port}`;
}

/** The `Set-Cookie` value that starts session `id`. */
export function sessionCookie(port: number, id: string): string {
  return `${sessionCookieName(port)}=${id}; Path=/; HttpOnly; SameSite=Strict`;
}

/** The session id a request carries, if any. */
function sessionOf(headers: IncomingHttpHeaders, port: number): string | undefined {
  const name = sessionCookieName(port);
  for (const part of (headers.cookie ?? "").split(";")) {
    const [key, ...value] = part.trim().split("=");
    if (key === name) return value.join("=");
  }
  return undefined;
}

/** The Host names accepted: the loopback address the dashboard binds, and `localhost`, on its port. */
export function allowedHosts(port: number): string[] {
  return [`127.0.0.1:${port}`, `localhost:${port}`];
}

/** Decides whether a request may be served; see the file's header for the rules. */
export function checkRequest(request: GuardRequest, context: GuardContext): GuardVerdict {
  const host = (request.headers.host ?? "").toLowerCase();
  if (!allowedHosts(context.port).includes(host)) {
    return { kind: "refuse", reason: `Host ${JSON.stringify(request.headers.host ?? "")} is not this dashboard's` };
  }
  const origin = request.headers.origin;
  const unsafe = !SAFE_METHODS.has(request.method.toUpperCase()) || request.upgrade === true;
  if (origin !== undefined && origin !== `http://${host}`) {
    return { kind: "refuse", reason: `Origin ${JSON.stringify(origin)} is not this dashboard's` };
  }
  if (unsafe && origin === undefined) {
    return { kind: "refuse", reason: `${request.upgrade ? "an upgrade" : request.method} without an Origin` };
  }
  const url = new URL(request.url, `http://${host}`);
  const token = url.searchParams.get("token");
  if (token !== null) {
    if (unsafe || url.pathname !== "/") return { kind: "refuse", reason: "a token is taken only by opening the link" };
    if (!verifyToken(context.key, token)) {
      return { kind: "refuse", reason: "the link's token is not this dashboard's (an older dashboard's link?)" };
    }
    return { kind: "login", location: "/" };
  }
  const session = sessionOf(request.headers, context.port);
  if (session === undefined) return { kind: "refuse", reason: "no session: open the link pi-sandbox dashboard prints" };
  if (!context.sessions.has(session)) {
    return { kind: "refuse", reason: "the session is not this dashboard's (it was restarted?)" };
  }
  return { kind: "allow" };
}
