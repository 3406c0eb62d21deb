// The dashboard's server without a VM: the fake action layer behind it shows what the page can and
// cannot make it do. Only a token link opens a session, once and within 10 minutes; the page's
// actions are the five it offers; guest text leaves escaped; no WebSocket is accepted, from any origin.
import http from "node:http";
import { startDashboardServer, type DashboardServer } from "../src/dashboard/server.js";
import { mintToken } from "../src/dashboard/tokens.js";
import type { DaemonLogger } from "../src/log.js";
import { runningView } from "./support/views.js";
import { dashboardSession } from "./support/dashboard-login.js";

const key = "ef".repeat(32);
const calls: Record<string, unknown>[] = [];
const logged: string[] = [];
const log: DaemonLogger = {
  info: (m) => logged.push(m),
  warn: (m) => logged.push(m),
  child: () => log,
};
const view = runningView({
  name: "web",
  previews: [{ service: "web", url: "http://127.0.0.2:4000/", title: "<b>x</b>\u001b[2J" }],
  usage: { cpuPercent: 12.5, rssBytes: 1024 },
});

async function call(input: Record<string, unknown>): Promise<unknown> {
  calls.push(input);
  if (input.action === "list") {
    return input.kind === "templates"
      ? { templates: [] }
      : { instances: [view, { ...view, name: "sleepy", state: "suspended" }] };
  }
  if (input.action === "logs") return { lines: ["boot \u001b]52;c;aGk=\u0007 done"], cursor: "1:10", more: false };
  return { name: input.name, state: "stopped" };
}

let server: DashboardServer;
let origin: string;
let cookie: string;

beforeAll(async () => {
  server = await startDashboardServer({ call, key, log, pollMs: { active: 100, idle: 100 } });
  origin = `http://127.0.0.1:${server.port}`;
  const login = await fetch(`${origin}/?token=${mintToken(key)}`, { redirect: "manual" });
  expect(login.status).toBe(303);
  expect(login.headers.get("location")).toBe("/");
  cookie = login.headers.get("set-cookie")!.split(";")[0]!;
});
afterAll(() => server.close());

/** A second server timed by a clock the test moves; closed by the caller. */
async function timedServer(startMs: number): Promise<{ server: DashboardServer; clock: { ms: number } }> {
  const clock = { ms: startMs };
  const timed = await startDashboardServer({ call, key, log, pollMs: { active: 100, idle: 100 }, now: () => clock.ms });
  return { server: timed, clock };
}

/** Opens `url` as a browser would follow a link (no redirect followed); status, page text and cookie. */
async function open(url: string, headers: Record<string, string> = {}) {
  const response = await fetch(url, { redirect: "manual", headers });
  return {
    status: response.status,
    text: await response.text(),
    location: response.headers.get("location"),
    setCookie: response.headers.get("set-cookie"),
  };
}

const post = (body: unknown, headers: Record<string, string> = { origin: `http://127.0.0.1:${server.port}` }) =>
  fetch(`${origin}/api/action`, {
    method: "POST",
    headers: { cookie, "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });

test("the page and its state need the session, and guest text in the state arrives escaped", async () => {
  expect((await fetch(`${origin}/`)).status).toBe(403);
  const page = await fetch(`${origin}/`, { headers: { cookie } });
  expect(page.status).toBe(200);
  expect(page.headers.get("content-security-policy")).toMatch(/default-src 'self'/);
  expect(page.headers.get("referrer-policy")).toBe("no-referrer");
  expect(await page.text()).toContain("<main");
  await new Promise((resolve) => setTimeout(resolve, 300));
  const state = (await (await fetch(`${origin}/api/state`, { headers: { cookie } })).json()) as {
    instances: { previews: { title: string }[] }[];
    history: Record<string, unknown[]>;
  };
  expect(state.instances[0]!.previews[0]!.title).toBe("<b>x</b>\\x1b[2J");
  expect(state.history.web!.length).toBeGreaterThan(0);
});

test("the page's actions reach the action layer; anything else, or from another origin, does not", async () => {
  calls.length = 0;
  expect((await post({ op: "stop", name: "web" })).status).toBe(200);
  expect((await post({ op: "restart-service", name: "web", service: "api" })).status).toBe(200);
  const refused = await post({ op: "exec", name: "web", cmd: "rm -rf /" });
  expect(refused.status).toBe(409);
  expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("CONTROLLER_BAD_INPUT");
  expect((await post({ op: "stop", name: "web" }, { origin: "http://127.0.0.2:4000" })).status).toBe(403);
  // The answers to a waiting egress request: the user's, through the page.
  expect((await post({ op: "egress-once", name: "web", host: "a.example.org" })).status).toBe(200);
  expect((await post({ op: "egress-instance", name: "web", host: "b.example.org" })).status).toBe(200);
  expect((await post({ op: "egress-deny", name: "web", host: "c.example.org" })).status).toBe(200);
  expect((await post({ op: "egress-deny", name: "web" })).status).toBe(409);
  // (`list` and `egress` with waiting are the snapshot's polls.)
  const acted = calls.filter((c) => c.action !== "list" && !(c.action === "egress" && c.waiting === true));
  expect(acted).toEqual([
    { action: "stop", name: "web" },
    { action: "services", name: "web", op: "restart", service: "api" },
    { action: "egress-approve", name: "web", host: "a.example.org", once: true },
    { action: "egress-approve", name: "web", host: "b.example.org" },
    { action: "egress-deny", name: "web", host: "c.example.org" },
  ]);
});

test("a followed log's lines arrive with their control characters escaped", async () => {
  const stream = new AbortController();
  const response = await fetch(`${origin}/api/logs?name=web`, { headers: { cookie }, signal: stream.signal });
  expect(response.headers.get("content-type")).toMatch(/text\/event-stream/);
  const reader = response.body!.getReader();
  let text = "";
  while (!text.includes("event: lines")) text += new TextDecoder().decode((await reader.read()).value);
  stream.abort();
  expect(text).toContain("boot \\\\x1b]52;c;aGk=\\\\x07 done");
});

test("a WebSocket upgrade is refused, even from the dashboard's own origin with its session", async () => {
  const status = await new Promise<number>((resolve, reject) => {
    const request = http.get(`${origin}/`, {
      headers: {
        cookie,
        origin,
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
      },
    });
    request.on("response", (response) => resolve(response.statusCode ?? 0));
    request.on("upgrade", () => resolve(101));
    request.on("error", reject);
  });
  expect(status).toBe(403);
  expect(logged.some((line) => line.startsWith("refused an upgrade"))).toBe(true);
});

test("nothing asks a suspended instance's daemon: its services and service logs wait until it runs", async () => {
  await new Promise((resolve) => setTimeout(resolve, 300));
  calls.length = 0;
  const services = await fetch(`${origin}/api/services?name=sleepy`, { headers: { cookie } });
  expect(services.status).toBe(409);
  expect(((await services.json()) as { error: { code: string } }).error.code).toBe("CONTROLLER_NOT_RUNNING");
  const stream = new AbortController();
  await fetch(`${origin}/api/logs?name=sleepy&service=web`, { headers: { cookie }, signal: stream.signal });
  await new Promise((resolve) => setTimeout(resolve, 1_200));
  stream.abort();
  expect(calls.filter((c) => c.name === "sleepy")).toEqual([]);
  // The controller log is a host file: it is read while the instance sleeps.
  const controllerLog = new AbortController();
  await fetch(`${origin}/api/logs?name=sleepy`, { headers: { cookie }, signal: controllerLog.signal });
  await new Promise((resolve) => setTimeout(resolve, 300));
  controllerLog.abort();
  expect(calls.filter((c) => c.name === "sleepy")).toContainEqual({ action: "logs", name: "sleepy", follow: true });
});

test("the session cookie has no Max-Age or Expires (it ends with the browser session), and is HttpOnly and SameSite=Strict", async () => {
  const first = await open(`${origin}/?token=${mintToken(key)}`);
  expect(first.status).toBe(303);
  expect(first.setCookie).toMatch(
    new RegExp(`^pi_sandbox_dashboard_${server.port}=[\\w-]+; Path=/; HttpOnly; SameSite=Strict$`),
  );
  expect(first.setCookie).not.toMatch(/max-age|expires|secure/i);
});

test("a link opens one session: opened again, in another browser or beside the first, it is refused with a page saying so and what to run", async () => {
  const link = `${origin}/?token=${mintToken(key)}`;
  const first = await open(link);
  expect(first.status).toBe(303);
  // The browser lands on the address without the token: a reload there does not use the link again.
  expect(first.location).toBe("/");
  const session = first.setCookie!.split(";")[0]!;
  expect((await open(`${origin}${first.location}`, { cookie: session })).status).toBe(200);

  const again = await open(link);
  expect(again.status).toBe(403);
  expect(again.setCookie).toBeNull();
  expect(again.text).toMatch(/^403 forbidden: this link was already used/);
  expect(again.text).toContain("Run pi-sandbox dashboard (or /sandbox dashboard in Pi) for a new link");
  // Another tab of the browser that opened it (it sends its session) gets no second session either.
  expect((await open(link, { cookie: session })).status).toBe(403);
  expect(logged).toContainEqual(expect.stringMatching(/^refused GET \/: this link was already used/));
});

test("two requests racing with one link get one session between them", async () => {
  const link = `${origin}/?token=${mintToken(key)}`;
  const statuses = (await Promise.all([open(link), open(link), open(link)])).map((r) => r.status).sort();
  expect(statuses).toEqual([303, 403, 403]);
});

test("a link unused for 10 minutes is refused with a page saying it expired and what to run", async () => {
  const start = Date.UTC(2026, 0, 1, 12);
  const { server: timed, clock } = await timedServer(start);
  try {
    const at = `http://127.0.0.1:${timed.port}`;
    const fresh = mintToken(key, start);
    const stale = mintToken(key, start);
    clock.ms = start + 10 * 60_000 - 1_000;
    expect((await open(`${at}/?token=${fresh}`)).status).toBe(303);
    clock.ms = start + 10 * 60_000 + 1_000;
    const expired = await open(`${at}/?token=${stale}`);
    expect(expired.status).toBe(403);
    expect(expired.setCookie).toBeNull();
    expect(expired.text).toMatch(/^403 forbidden: this link expired/);
    expect(expired.text).toContain("Run pi-sandbox dashboard (or /sandbox dashboard in Pi) for a new link");
    // Nor does a link minted an hour ahead of the dashboard's clock open it.
    expect((await open(`${at}/?token=${mintToken(key, clock.ms + 3_600_000)}`)).status).toBe(403);
  } finally {
    await timed.close();
  }
});

test("a session unused for 8 hours ends, while one whose page stays open (its event stream) does not", async () => {
  const start = Date.UTC(2026, 0, 1, 12);
  const { server: timed, clock } = await timedServer(start);
  const hours = (n: number) => n * 3_600_000;
  try {
    const at = `http://127.0.0.1:${timed.port}`;
    const login = async () => (await open(`${at}/?token=${mintToken(key, clock.ms)}`)).setCookie!.split(";")[0]!;
    const state = async (session: string) => (await open(`${at}/api/state`, { cookie: session })).status;

    const used = await login();
    clock.ms += hours(7);
    expect(await state(used)).toBe(200);
    clock.ms += hours(7);
    expect(await state(used)).toBe(200);
    clock.ms += hours(8) + 1;
    const idle = await open(`${at}/api/state`, { cookie: used });
    expect(idle.status).toBe(403);
    expect(idle.text).toContain("went unused for 8 hours");
    expect(idle.text).toContain("pi-sandbox dashboard");

    const watching = await login();
    const stream = new AbortController();
    const events = await fetch(`${at}/api/events`, { headers: { cookie: watching }, signal: stream.signal });
    expect(events.status).toBe(200);
    clock.ms += hours(20);
    expect(await state(watching)).toBe(200);
    stream.abort();
    // The server sees the stream close a moment later; until then each look counts as use.
    const deadline = Date.now() + 5_000;
    let status = 200;
    while (status === 200 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      clock.ms += hours(8) + 1;
      status = await state(watching);
    }
    expect(status).toBe(403);
  } finally {
    await timed.close();
  }
});

test("the state carries each running instance's waiting egress requests; only while a page listens does the dashboard say it can answer", async () => {
  const present: string[][] = [];
  const ask = { host: "new.example.org", port: 443, protocol: "https", method: "GET", waiting: 1 };
  const asking = async (input: Record<string, unknown>): Promise<unknown> =>
    input.action === "egress" ? { name: input.name, grants: [], waiting: [ask], hosts: [] } : call(input);
  const egressServer = await startDashboardServer({
    call: asking,
    key,
    log,
    pollMs: { active: 50, idle: 50 },
    present: async (names) => void present.push(names),
  });
  try {
    const at = `http://127.0.0.1:${egressServer.port}`;
    const session = await dashboardSession(at, key);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const state = (await (await fetch(`${at}/api/state`, { headers: { cookie: session } })).json()) as {
      egress: Record<string, unknown[]>;
    };
    // The suspended instance is not asked (that would wake it), and nobody listened yet.
    expect(state.egress).toEqual({ web: [ask] });
    expect(present).toEqual([]);
    const stream = new AbortController();
    const events = await fetch(`${at}/api/events`, { headers: { cookie: session }, signal: stream.signal });
    expect(events.status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 200));
    stream.abort();
    expect(present.length).toBeGreaterThan(0);
    expect(new Set(present.map((names) => names.join(",")))).toEqual(new Set(["web"]));
  } finally {
    await egressServer.close();
  }
});
