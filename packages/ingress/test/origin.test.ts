// One gateway is one instance. A page served by a preview of instance A must not drive a preview
// of instance B (or the other way round) through the browser: WebSockets and state-changing
// requests from it are refused. Pages of A's own previews may talk to each other (a `web` service
// calls `${services.api.publicURL}`), and clients that send no Origin are not browsers.
import { createServer, type Server } from "node:http";
import { WebSocket, WebSocketServer } from "ws";
import type { PreviewGateway, PreviewInfo } from "../src/index.js";
import { crossOriginRefusal, parseLoopbackOrigin } from "../src/host-guard.js";
import { fetchRaw, memoryLogger, testGateway } from "./support/helpers.js";

/** Resolves with "open" or the status and body of the refusal. */
function upgrade(url: string, origin?: string): Promise<{ status: number | "open"; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url.replace(/^http/, "ws"), origin === undefined ? {} : { headers: { origin } });
    ws.once("open", () => {
      ws.terminate();
      resolve({ status: "open", body: "" });
    });
    ws.once("unexpected-response", (_req, res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
    });
    ws.once("error", reject);
  });
}

describe("previews of one instance cannot be driven from another", () => {
  let guest: Server;
  let wss: WebSocketServer;
  const received: string[] = [];
  let instanceA: PreviewGateway;
  let instanceB: PreviewGateway;
  let web: PreviewInfo;
  let api: PreviewInfo;
  let terminal: PreviewInfo;
  const logger = memoryLogger();

  beforeAll(async () => {
    guest = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        received.push(`${req.method} ${req.url}`);
        res.end("guest");
      });
    });
    wss = new WebSocketServer({ server: guest });
    wss.on("connection", (ws, req) => received.push(`WS ${req.url}`));
    await new Promise<void>((resolve) => guest.listen(0, "127.0.0.1", resolve));
    const guestPort = (guest.address() as { port: number }).port;
    instanceA = testGateway({ logger });
    instanceB = testGateway({ logger });
    web = await instanceA.open({ key: "web", guestPort, links: [] });
    api = await instanceA.open({ key: "api", guestPort, links: [] });
    terminal = await instanceB.open({ key: "terminal", guestPort, links: [] });
  });

  afterAll(async () => {
    await instanceA.closeAll();
    await instanceB.closeAll();
    for (const client of wss.clients) client.terminate();
    await new Promise<void>((resolve) => wss.close(() => resolve()));
    await new Promise<void>((resolve) => guest.close(() => resolve()));
  });

  test("a WebSocket from a page of instance A into instance B is refused with a 403 that says why", async () => {
    const before = received.length;
    const answer = await upgrade(`${terminal.origin}/terminals/1`, web.origin);
    expect(answer.status).toBe(403);
    expect(answer.body).toContain(`WebSocket from page origin "${web.origin}"`);
    expect(answer.body).toContain("other previews of the same instance");
    expect(received.length).toBe(before);
    expect(logger.lines.some((line) => line.includes("refused upgrade /terminals/1"))).toBe(true);
  });

  test("a WebSocket from a page of instance B into instance A is refused", async () => {
    expect((await upgrade(`${web.origin}/ws`, terminal.origin)).status).toBe(403);
    expect((await upgrade(`${api.origin}/ws`, terminal.origin.replace("127.0.0.1", "localhost"))).status).toBe(403);
  });

  test.each([
    ["another local app", "http://127.0.0.1:1"],
    ["a sandboxed or file page", "null"],
    ["a foreign site", "https://evil.example"],
    ["an https loopback origin", (p: PreviewInfo) => `https://127.0.0.1:${p.hostPort}`],
  ])("a WebSocket from %s is refused", async (_label, origin) => {
    const value = typeof origin === "function" ? origin(web) : origin;
    expect((await upgrade(`${web.origin}/ws`, value)).status).toBe(403);
  });

  test("pages of the same instance reach each other's WebSockets, under any loopback name", async () => {
    expect((await upgrade(`${api.origin}/ws`, web.origin)).status).toBe("open");
    expect((await upgrade(`${web.origin}/ws`, api.origin)).status).toBe("open");
    expect((await upgrade(`${api.origin}/ws`, `http://localhost:${web.hostPort}`)).status).toBe("open");
    expect((await upgrade(`${api.origin}/ws`, `http://[::1]:${web.hostPort}`)).status).toBe("open");
    expect((await upgrade(`${web.origin}/ws`, web.origin)).status).toBe("open");
    expect((await upgrade(`${terminal.origin}/ws`, terminal.origin)).status).toBe("open");
  });

  test("a WebSocket without an Origin (not a browser) is accepted", async () => {
    expect((await upgrade(`${terminal.origin}/ws`)).status).toBe("open");
  });

  test.each(["POST", "PUT", "PATCH", "DELETE"])(
    "%s from a page of the other instance is refused both ways, before the guest sees it",
    async (method) => {
      const before = received.length;
      const intoB = await fetchRaw(`${terminal.origin}/api/kernels`, { method, headers: { origin: web.origin } });
      expect(intoB.status).toBe(403);
      expect(intoB.headers["content-type"]).toMatch(/^text\/plain/);
      expect(intoB.body.toString()).toContain(`${method} from page origin "${web.origin}"`);
      const intoA = await fetchRaw(`${api.origin}/items`, { method, headers: { origin: terminal.origin } });
      expect(intoA.status).toBe(403);
      expect(received.length).toBe(before);
    },
  );

  test("a state-changing request marked Sec-Fetch-Site: cross-site without an Origin is refused", async () => {
    const res = await fetchRaw(`${web.origin}/items`, { method: "POST", headers: { "sec-fetch-site": "cross-site" } });
    expect(res.status).toBe(403);
    expect(res.body.toString()).toContain("Sec-Fetch-Site: cross-site");
  });

  test("state-changing requests from the same instance, or without an Origin, reach the guest", async () => {
    const headers = { origin: web.origin, "sec-fetch-site": "same-site", "content-type": "application/json" };
    const fromWeb = await fetchRaw(`${api.origin}/items`, { method: "POST", headers, body: "{}" });
    expect(fromWeb.status).toBe(200);
    // A localhost page calling 127.0.0.1 is cross-site to the browser; its Origin still names the instance.
    const fromLocalhost = await fetchRaw(`${api.origin}/items`, {
      method: "DELETE",
      headers: { origin: `http://localhost:${web.hostPort}`, "sec-fetch-site": "cross-site" },
    });
    expect(fromLocalhost.status).toBe(200);
    const noOrigin = await fetchRaw(`${terminal.origin}/items`, { method: "POST", body: "x" });
    expect(noOrigin.status).toBe(200);
    expect(received).toEqual(expect.arrayContaining(["POST /items", "DELETE /items"]));
  });

  test("reads are not checked: GET, HEAD and OPTIONS from any page reach the guest (CORS is the app's)", async () => {
    for (const method of ["GET", "HEAD", "OPTIONS"]) {
      const res = await fetchRaw(`${terminal.origin}/`, { method, headers: { origin: web.origin } });
      expect(res.status).toBe(200);
    }
  });

  test("a closed preview's origin no longer counts as the instance's", async () => {
    const extra = await instanceA.open({ key: "extra", guestPort: web.guestPort, links: [] });
    expect((await upgrade(`${web.origin}/ws`, extra.origin)).status).toBe("open");
    await instanceA.close("extra");
    expect((await upgrade(`${web.origin}/ws`, extra.origin)).status).toBe(403);
    await instanceA.release("extra");
  });

  test("the check can be turned off", async () => {
    const open = testGateway({ checkOrigin: false });
    try {
      const preview = await open.open({ key: "any", guestPort: web.guestPort, links: [] });
      expect((await upgrade(`${preview.origin}/ws`, "https://evil.example")).status).toBe("open");
      const post = await fetchRaw(`${preview.origin}/`, { method: "POST", headers: { origin: terminal.origin } });
      expect(post.status).toBe(200);
    } finally {
      await open.closeAll();
    }
  });
});

// Linux: every address of 127.0.0.0/8 is bindable, so each instance has its own.
const linuxOnly = process.platform === "linux" ? describe : describe.skip;

linuxOnly("instances on loopback addresses of their own", () => {
  let guest: Server;
  let wss: WebSocketServer;
  let instanceA: PreviewGateway;
  let instanceB: PreviewGateway;
  let web: PreviewInfo;
  let api: PreviewInfo;
  let terminal: PreviewInfo;

  beforeAll(async () => {
    guest = createServer((req, res) => res.end("guest"));
    wss = new WebSocketServer({ server: guest });
    await new Promise<void>((resolve) => guest.listen(0, "127.0.0.1", resolve));
    const guestPort = (guest.address() as { port: number }).port;
    instanceA = testGateway({ address: "127.0.0.2" });
    instanceB = testGateway({ address: "127.0.0.3" });
    web = await instanceA.open({ key: "web", guestPort, links: [] });
    api = await instanceA.open({ key: "api", guestPort, links: [] });
    terminal = await instanceB.open({ key: "terminal", guestPort, links: [] });
  });

  afterAll(async () => {
    await instanceA.closeAll();
    await instanceB.closeAll();
    for (const client of wss.clients) client.terminate();
    await new Promise<void>((resolve) => wss.close(() => resolve()));
    await new Promise<void>((resolve) => guest.close(() => resolve()));
  });

  test("each instance's previews have origins on its own address", () => {
    expect(web.origin).toBe(`http://127.0.0.2:${web.hostPort}`);
    expect(api.origin).toBe(`http://127.0.0.2:${api.hostPort}`);
    expect(terminal.origin).toBe(`http://127.0.0.3:${terminal.hostPort}`);
  });

  test("pages of the same instance still reach each other's WebSockets and POSTs", async () => {
    expect((await upgrade(`${api.origin}/ws`, web.origin)).status).toBe("open");
    const post = await fetchRaw(`${api.origin}/items`, { method: "POST", headers: { origin: web.origin } });
    expect(post.status).toBe(200);
  });

  test("a page of instance A cannot drive instance B, nor B drive A", async () => {
    expect((await upgrade(`${terminal.origin}/ws`, web.origin)).status).toBe(403);
    expect((await upgrade(`${web.origin}/ws`, terminal.origin)).status).toBe(403);
    const post = await fetchRaw(`${terminal.origin}/items`, { method: "POST", headers: { origin: api.origin } });
    expect(post.status).toBe(403);
  });

  test("an origin with one of A's ports on another address (or on localhost) does not count as A's", async () => {
    for (const host of ["127.0.0.3", "127.0.0.1", "localhost"]) {
      expect((await upgrade(`${api.origin}/ws`, `http://${host}:${web.hostPort}`)).status).toBe(403);
    }
  });
});

describe("origin helpers", () => {
  test("parseLoopbackOrigin reads http loopback origins only, with their host", () => {
    expect(parseLoopbackOrigin("http://127.0.0.1:3000")).toEqual({ host: "127.0.0.1", port: 3000 });
    expect(parseLoopbackOrigin("http://127.4.5.6:3000")).toEqual({ host: "127.4.5.6", port: 3000 });
    expect(parseLoopbackOrigin("http://LOCALHOST:5173")).toEqual({ host: "localhost", port: 5173 });
    expect(parseLoopbackOrigin("http://[::1]:8080")).toEqual({ host: "[::1]", port: 8080 });
    expect(parseLoopbackOrigin("http://localhost")).toEqual({ host: "localhost", port: 80 });
    for (const origin of [
      "https://127.0.0.1:3000",
      "http://127.0.0.1:3000/",
      "http://user@127.0.0.1:3000",
      "http://127.0.0.256:3000",
      "http://127.00.0.1:3000",
      "http://128.0.0.1:3000",
      "http://localhost.evil.example:3000",
      "http://127.0.0.1:70000",
      "http://127.0.0.1:3000, http://127.0.0.1:4000",
      "null",
    ]) {
      expect(parseLoopbackOrigin(origin)).toBeUndefined();
    }
  });

  test("crossOriginRefusal checks upgrades and unsafe methods only", () => {
    const mine = ({ host, port }: { host: string; port: number }) => host === "127.0.0.1" && port === 4000;
    const ask = (method: string, origin: string | undefined, upgrade = false, fetchSite?: string) =>
      crossOriginRefusal({ method, origin, fetchSite, upgrade }, mine);
    expect(ask("GET", "http://127.0.0.1:5000")).toBeUndefined();
    expect(ask("GET", "http://127.0.0.1:5000", true)).toMatch(/^WebSocket from page origin/);
    expect(ask("GET", "http://127.0.0.1:4000", true)).toBeUndefined();
    expect(ask("GET", "http://127.0.0.9:4000", true)).toMatch(/^WebSocket from page origin/);
    expect(ask("POST", "http://127.0.0.1:5000")).toMatch(/^POST from page origin/);
    expect(ask("POST", undefined)).toBeUndefined();
    expect(ask("POST", undefined, false, "same-origin")).toBeUndefined();
    expect(ask("POST", undefined, false, "cross-site")).toMatch(/Sec-Fetch-Site: cross-site/);
  });
});
