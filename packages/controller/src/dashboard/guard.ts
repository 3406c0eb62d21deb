// Who may use the dashboard, decided per request before anything else runs: the same rules as
// previews (a Host of the loopback name and this port, against DNS rebinding), plus a session.
// A browser gets a session only by opening a link with a token minted from the private state
// root, once per link and within 10 minutes of its minting; it is kept in an HttpOnly,
// SameSite=Strict cookie that ends with the browser session. Requests that change something (any
// unsafe method) and WebSocket upgrades must carry this origin's Origin, so a page served by a
// guest (a preview) can neither act through the user's session nor open a socket to it.
import type { IncomingHttpHeaders } from "node:http";
import { SESSION_IDLE_MS } from "./sessions.js";
import { LINK_TTL_MS, checkToken, type LinkToken } from "./tokens.js";

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
  /** The sessions handed out: `has` is false for an unknown id and for one that went idle. */
  sessions: { has(id: string): boolean };
  /** The nonces of the links that already opened a session. */
  usedLinks: { has(nonce: string): boolean };
  /** The time now, in ms since the epoch (a link's age is measured against it). */
  nowMs: number;
}

/** The guard's decision. */
export type GuardVerdict =
  /** Serve it, for session `session` (the caller records the use). */
  | { kind: "allow"; session: string }
  /**
   * A link with a valid, fresh, unused token: mark `link` used, start a session (set the cookie)
   * and redirect to the token-free URL, so a reload or the history never sends the token again.
   */
  | { kind: "login"; location: string; link: LinkToken }
  /** 403, with the reason (for the log and the refusal page) and, when it differs from the usual, what to do. */
  | { kind: "refuse"; reason: string; hint?: string };

const RUN_FOR_NEW_LINK = "Run pi-sandbox dashboard (or /sandbox dashboard in Pi) for a new link";
/** What to do for a new link, on the refusal page. */
export const NEW_LINK_HINT = `${RUN_FOR_NEW_LINK}, and open it in this browser.`;

const SAFE_METHODS = new Set(["GET", "HEAD"]);
const SESSION_IDLE_HOURS = SESSION_IDLE_MS / 3_600_000;
const LINK_TTL_MINUTES = LINK_TTL_MS / 60_000;

/** The session cookie's name: per port, since browsers share cookies across a host's ports. */
export function sessionCookieName(port: number): string {
  return `pi_sandbox_dashboard_${port}`;
}

/**
 * The `Set-Cookie` value that starts session `id`: no Max-Age or Expires (the cookie ends with the
 * browser session; the server ends idle sessions itself), HttpOnly (the page's scripts never see
 * it), SameSite=Strict (no other site's page sends it). Not Secure: the dashboard serves plain HTTP
 * on 127.0.0.1 only, never over a network, and not every browser keeps a Secure cookie set over it.
 */
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
    // Only a plain GET of the page takes a token: a HEAD (a link checker) or a POST uses no link up.
    if (request.method.toUpperCase() !== "GET" || request.upgrade === true || url.pathname !== "/") {
      return { kind: "refuse", reason: "a token is taken only by opening the link" };
    }
    return tokenVerdict(token, context, host);
  }
  const session = sessionOf(request.headers, context.port);
  if (session === undefined) return { kind: "refuse", reason: "no session: open the link pi-sandbox dashboard prints" };
  if (!context.sessions.has(session)) {
    return {
      kind: "refuse",
      reason: `the session is not this dashboard's (it was restarted?) or went unused for ${SESSION_IDLE_HOURS} hours`,
    };
  }
  return { kind: "allow", session };
}

/** The verdict on a link's token: a login only for a valid one of this key, fresh and not used before. */
function tokenVerdict(token: string, context: GuardContext, host: string): GuardVerdict {
  const checked = checkToken(context.key, token, context.nowMs);
  if (!checked.ok) {
    switch (checked.fault) {
      case "foreign":
        return { kind: "refuse", reason: "the link's token is not this dashboard's (an older dashboard's link?)" };
      case "expired":
        return {
          kind: "refuse",
          reason: `this link expired: a link opens the dashboard only within ${LINK_TTL_MINUTES} minutes of being printed`,
          hint: `${RUN_FOR_NEW_LINK}, and open it within ${LINK_TTL_MINUTES} minutes.`,
        };
      case "future":
        return { kind: "refuse", reason: "this link is dated in the future (was the clock turned back?)" };
    }
  }
  if (context.usedLinks.has(checked.nonce)) {
    return {
      kind: "refuse",
      reason: "this link was already used: each link opens the dashboard once, in one browser",
      hint: `${RUN_FOR_NEW_LINK}. The browser that opened this link can go on at http://${host}/.`,
    };
  }
  return { kind: "login", location: "/", link: { nonce: checked.nonce, issuedAtMs: checked.issuedAtMs } };
}
