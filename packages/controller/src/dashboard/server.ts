// The dashboard's HTTP server on 127.0.0.1: the page and its assets, a JSON snapshot and its live
// updates (server-sent events), log following, an instance's ledger as a timeline (timeline.ts),
// the few actions the page offers, and diff stats of forks and checkpoints on the page's demand
// (diff-stats.ts). An action, services, a log or a ledger of another context's instance (a request
// naming a context the page lists) goes through that context, as the CLI's --context does. Every request passes the guard (guard.ts) first, against the sessions and used
// links this process remembers (sessions.ts); everything else goes through the action layer
// (`callAction`), never to the state files.
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { fileURLToPath } from "node:url";
import { ControllerError } from "../errors.js";
import type { DaemonLogger } from "../log.js";
import { NEW_LINK_HINT, checkRequest, sessionCookie } from "./guard.js";
import { followLog, type LogEvent } from "./log-stream.js";
import { followLedger, type TimelineEvent } from "./timeline.js";
import { DiffStats, diffRequest } from "./diff-stats.js";
import type { CallInFn } from "./call.js";
import { ContextPoller, pageContext, runsIn } from "./contexts.js";
import { SnapshotPoller, errorJson, escapeDeep, type CallFn } from "./snapshot.js";
import { SessionTable, UsedLinks } from "./sessions.js";

/** The page's files, shipped beside `dist/` (and `src/`) in the package's `assets/dashboard/`. */
const ASSETS: Readonly<Record<string, { file: string; type: string }>> = {
  "/": { file: "index.html", type: "text/html; charset=utf-8" },
  "/app.js": { file: "app.js", type: "text/javascript; charset=utf-8" },
  "/app.css": { file: "app.css", type: "text/css; charset=utf-8" },
  "/timeline.js": { file: "timeline.js", type: "text/javascript; charset=utf-8" },
};

/** Headers of every answer: no caching, no framing, no referrer (the links are previews), own scripts only. */
const COMMON_HEADERS: Readonly<Record<string, string>> = {
  "cache-control": "no-store",
  "content-security-policy":
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'",
  "referrer-policy": "no-referrer",
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
};

/** The largest action request body the page sends, in bytes. */
const MAX_BODY_BYTES = 16 * 1024;

/** Options of {@link startDashboardServer}. */
export interface DashboardServerOptions {
  /** Runs one action (bound to the dashboard's state root). */
  call: CallFn;
  /** Runs one action in another context (over ssh); without it the page lists this machine's instances only. */
  callIn?: CallInFn;
  /** How long another context may take to answer `list`, in ms (tests shorten it). */
  contextTimeoutMs?: number;
  /** Hex key the links' tokens are signed with. */
  key: string;
  /** Where refusals and failures are logged. */
  log: DaemonLogger;
  /** Port to listen on; 0 (default) picks a free one. */
  port?: number;
  /** Poll intervals of the snapshot, in ms (tests shorten them). */
  pollMs?: { active?: number; idle?: number };
  /** The clock links and sessions are timed by, in ms since the epoch (tests inject one); `Date.now` by default. */
  now?: () => number;
  /** Whether the action layer has `diff`: the page offers diff stats of forks and checkpoints then. */
  diff?: boolean;
  /** Says the dashboard can answer these running instances' egress asks (while a page listens). */
  present?: (names: string[]) => Promise<void>;
}

/** A running dashboard server. */
export interface DashboardServer {
  /** The port it listens on (127.0.0.1). */
  port: number;
  /** Stops listening, ends the page's streams and polling. */
  close(): Promise<void>;
}

function assetDir(): string {
  // src/dashboard/server.ts and dist/dashboard/server.js are both two levels below the package.
  return fileURLToPath(new URL("../../assets/dashboard/", import.meta.url));
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { ...COMMON_HEADERS, "content-type": "application/json; charset=utf-8" });
  res.end(JSON.stringify(body));
}

/** The refusal page: what was refused and why, then what to do (a new link, unless `hint` says otherwise). */
function refuse(res: ServerResponse, reason: string, hint: string = NEW_LINK_HINT): void {
  res.writeHead(403, { ...COMMON_HEADERS, "content-type": "text/plain; charset=utf-8" });
  res.end(`403 forbidden: ${reason}.\n${hint}\n`);
}

async function readBody(req: IncomingMessage): Promise<unknown> {
  if (!(req.headers["content-type"] ?? "").startsWith("application/json")) {
    throw new ControllerError("CONTROLLER_BAD_INPUT", "the dashboard takes actions as application/json only");
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new ControllerError("CONTROLLER_BAD_INPUT", "the request body is too large");
    chunks.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    throw new ControllerError("CONTROLLER_BAD_INPUT", "the request body is not JSON");
  }
}

/**
 * Maps the page's request onto an action; the page may start, stop, suspend, destroy, restart a
 * service, and answer a waiting egress request (allow once, allow for the instance, deny). The
 * request's `context` (another machine's instance) is read apart, by `pageContext`.
 */
export function pageAction(body: unknown): Record<string, unknown> {
  const input = (body ?? {}) as Record<string, unknown>;
  const { op, name, kind, service, confirm, host } = input;
  const bad = (message: string) =>
    new ControllerError("CONTROLLER_BAD_INPUT", message, {
      hint: "The page sends start, stop, suspend, destroy, restart-service or egress-once|instance|deny with a name.",
    });
  if (typeof name !== "string") throw bad("the action names no instance");
  switch (op) {
    case "start":
    case "stop":
    case "suspend":
      return { action: op, name };
    case "destroy":
      return { action: "destroy", name, confirm, ...(kind === "templates" ? { kind } : {}) };
    case "restart-service":
      if (typeof service !== "string") throw bad("restart-service names no service");
      return { action: "services", name, op: "restart", service };
    case "egress-once":
    case "egress-instance":
      if (typeof host !== "string") throw bad(`${op} names no host`);
      return { action: "egress-approve", name, host, ...(op === "egress-once" ? { once: true } : {}) };
    case "egress-deny":
      if (typeof host !== "string") throw bad("egress-deny names no host");
      return { action: "egress-deny", name, host };
    default:
      throw bad(`${JSON.stringify(op)} is not an action of the dashboard`);
  }
}

function notRunning(name: string): ControllerError {
  return new ControllerError("CONTROLLER_NOT_RUNNING", `${name} is not running`, {
    hint: `Start it (pi-sandbox start ${name}) to see its services and their logs.`,
    details: { name },
  });
}

/** Opens a server-sent event stream; returns a writer of named events. */
function eventStream(req: IncomingMessage, res: ServerResponse): (event: string, data: unknown) => void {
  res.writeHead(200, {
    ...COMMON_HEADERS,
    "content-type": "text/event-stream; charset=utf-8",
    connection: "keep-alive",
  });
  res.write(": stream\n\n");
  const heartbeat = setInterval(() => res.write(": keep-alive\n\n"), 15_000);
  req.on("close", () => clearInterval(heartbeat));
  return (event, data) => res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
}

/** Starts the server on 127.0.0.1 and the snapshot polling. */
export async function startDashboardServer(options: DashboardServerOptions): Promise<DashboardServer> {
  const { call, key, log } = options;
  const now = options.now ?? Date.now;
  const sessions = new SessionTable(now);
  const usedLinks = new UsedLinks(now);
  const poller = new SnapshotPoller(call, {
    activeMs: options.pollMs?.active,
    idleMs: options.pollMs?.idle,
    diff: options.diff === true,
    ...(options.present ? { present: options.present } : {}),
    ...(options.callIn
      ? {
          contexts: new ContextPoller(call, options.callIn, {
            timeoutMs: options.contextTimeoutMs,
            // Who this dashboard is among the egress answerers of the other machines.
            answererId: `dashboard-${randomBytes(8).toString("hex")}`,
          }),
        }
      : {}),
  });
  const diffStats = new DiffStats(call, { now });
  const streams = new Set<ServerResponse>();
  /**
   * Opens a server-sent event stream held by the browser session `session` (which stays alive while
   * it is open); `signal` aborts when the page closes it.
   */
  const openStream = (req: IncomingMessage, res: ServerResponse, session: string) => {
    const send = eventStream(req, res);
    streams.add(res);
    const release = sessions.holdStream(session);
    const closed = new AbortController();
    req.on("close", () => {
      closed.abort();
      release();
      streams.delete(res);
    });
    return { send, signal: closed.signal };
  };
  let port = 0;
  // Only a running instance is asked about its guest: one that suspended itself keeps a daemon,
  // and a question to it would wake it.
  const isRunning = (name: string, context?: string) =>
    context === undefined
      ? poller.snapshot.instances.some((v) => v.name === name && v.state === "running")
      : runsIn(poller.snapshot.contexts, context, name);
  /** How to call an action of context `context` (this machine when undefined). */
  const callFor = (context: string | undefined): CallFn => {
    const { callIn } = options;
    return context === undefined || !callIn ? call : (input) => callIn(context, input);
  };
  /** The context a query names (`context=`), checked against the listed ones. */
  const queryContext = (url: URL) =>
    pageContext(url.searchParams.get("context") ?? undefined, poller.snapshot.contexts);

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const verdict = checkRequest(
      { method: req.method ?? "GET", url: req.url ?? "/", headers: req.headers },
      { port, key, sessions, usedLinks, nowMs: now() },
    );
    if (verdict.kind === "refuse") {
      log.warn(`refused ${req.method} ${(req.url ?? "").split("?")[0]}: ${verdict.reason}`);
      return refuse(res, verdict.reason, verdict.hint);
    }
    if (verdict.kind === "login") {
      // Marked used in the same turn as the guard's check (no await between): of two requests
      // racing with one link, the second finds it used.
      usedLinks.add(verdict.link.nonce, verdict.link.issuedAtMs);
      const id = sessions.create();
      log.info(`a link minted ${Math.round((now() - verdict.link.issuedAtMs) / 1000)} s ago opened a browser session`);
      res.writeHead(303, { ...COMMON_HEADERS, location: verdict.location, "set-cookie": sessionCookie(port, id) });
      return void res.end();
    }
    sessions.touch(verdict.session);
    const url = new URL(req.url ?? "/", "http://dashboard.invalid");
    const asset = ASSETS[url.pathname];
    if (asset && req.method === "GET") {
      const body = await readFile(`${assetDir()}${asset.file}`);
      res.writeHead(200, { ...COMMON_HEADERS, "content-type": asset.type });
      return void res.end(body);
    }
    if (url.pathname === "/api/state" && req.method === "GET") return sendJson(res, 200, poller.snapshot);
    if (url.pathname === "/api/events" && req.method === "GET") {
      const { send, signal } = openStream(req, res, verdict.session);
      const unsubscribe = poller.subscribe((snapshot) => send("state", snapshot));
      signal.addEventListener("abort", unsubscribe);
      send("state", poller.snapshot);
      return;
    }
    if (url.pathname === "/api/logs" && req.method === "GET") {
      let context: string | undefined;
      try {
        context = queryContext(url);
      } catch (error) {
        return sendJson(res, 409, { error: errorJson(error) });
      }
      const name = url.searchParams.get("name") ?? "";
      const service = url.searchParams.get("service") ?? undefined;
      const { send, signal } = openStream(req, res, verdict.session);
      // The controller log is a host file; a service log is read by the daemon, only while running.
      const readable = service === undefined ? undefined : () => isRunning(name, context);
      void followLog(callFor(context), { name, service }, (event: LogEvent) => send(event.type, event), signal, {
        readable,
      });
      return;
    }
    if (url.pathname === "/api/audit" && req.method === "GET") {
      let context: string | undefined;
      try {
        context = queryContext(url);
      } catch (error) {
        return sendJson(res, 409, { error: errorJson(error) });
      }
      const { send, signal } = openStream(req, res, verdict.session);
      const target = { name: url.searchParams.get("name") ?? "", kinds: url.searchParams.getAll("kind") };
      void followLedger(callFor(context), target, (event: TimelineEvent) => send(event.type, event), signal, {
        pollMs: options.pollMs?.active,
      });
      return;
    }
    if (url.pathname === "/api/services" && req.method === "GET") {
      const name = url.searchParams.get("name") ?? "";
      try {
        const context = queryContext(url);
        if (!isRunning(name, context)) return sendJson(res, 409, { error: errorJson(notRunning(name)) });
        return sendJson(res, 200, escapeDeep(await callFor(context)({ action: "services", name, op: "status" })));
      } catch (error) {
        return sendJson(res, 409, { error: errorJson(error) });
      }
    }
    if (url.pathname === "/api/action" && req.method === "POST") {
      try {
        const body = await readBody(req);
        const action = pageAction(body);
        const context = pageContext((body as { context?: unknown } | null)?.context, poller.snapshot.contexts);
        const on = context === undefined ? "" : ` (context ${context})`;
        log.info(`${action.action} ${String(action.name)}${action.service ? ` ${String(action.service)}` : ""}${on}`);
        const result = await callFor(context)(action);
        void poller.refresh();
        return sendJson(res, 200, { result: escapeDeep(result) });
      } catch (error) {
        void poller.refresh();
        return sendJson(res, 409, { error: errorJson(error) });
      }
    }
    // A POST, so the guard asks for this page's Origin: another page cannot make a guest run diffs.
    if (url.pathname === "/api/diff" && req.method === "POST") {
      try {
        if (!options.diff) throw new ControllerError("CONTROLLER_UNKNOWN_ACTION", "this controller has no diff action");
        const request = diffRequest(await readBody(req), poller.snapshot);
        log.info(
          `diff stat ${"against" in request ? `${request.name} against ${request.against}` : `${request.name} since ${request.since}`}`,
        );
        return sendJson(res, 200, { stat: await diffStats.get(request) });
      } catch (error) {
        return sendJson(res, 409, { error: errorJson(error) });
      }
    }
    sendJson(res, 404, { error: errorJson(new ControllerError("CONTROLLER_BAD_INPUT", `no page ${url.pathname}`)) });
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      log.warn(`failed ${req.method} ${(req.url ?? "").split("?")[0]}: ${String(error)}`);
      if (!res.headersSent) sendJson(res, 500, { error: errorJson(error) });
      else res.end();
    });
  });
  // The page uses no WebSocket: every upgrade is refused, after the guard has logged why.
  server.on("upgrade", (req: IncomingMessage, socket: Duplex) => {
    const verdict = checkRequest(
      { method: req.method ?? "GET", url: req.url ?? "/", headers: req.headers, upgrade: true },
      { port, key, sessions, usedLinks, nowMs: now() },
    );
    log.warn(`refused an upgrade: ${verdict.kind === "refuse" ? verdict.reason : "the dashboard takes no WebSocket"}`);
    socket.end("HTTP/1.1 403 Forbidden\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  port = (server.address() as AddressInfo).port;
  poller.start();
  return {
    port,
    close: async () => {
      poller.close();
      for (const res of streams) res.end();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
