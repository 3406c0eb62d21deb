// The gateway's wake hook and activity counts: what an owner that suspends an idle guest relies on.
import { createServer, type Server } from "node:http";
import { WebSocket, WebSocketServer } from "ws";
import { PreviewGateway } from "../src/index.js";
import { fetchRaw, httpStandIn, sleep, testGateway, type StandIn } from "./support/helpers.js";

let guest: StandIn;
let guestRequests = 0;

beforeAll(async () => {
  guest = await httpStandIn((_req, res) => {
    guestRequests++;
    res.end("hello from the guest");
  });
});

afterAll(async () => {
  await guest.close();
});

test("a request waits for the owner's wake, then gets the guest's answer", async () => {
  let wakes = 0;
  let awake = false;
  await using gateway = testGateway({
    wake: () => {
      if (awake) return undefined;
      wakes++;
      return sleep(300).then(() => {
        awake = true;
      });
    },
  });
  const { origin } = await gateway.open({ key: "web", guestPort: guest.port, links: [] });
  const started = Date.now();
  const first = await fetchRaw(`${origin}/`);
  expect(first.status).toBe(200);
  expect(first.body.toString()).toBe("hello from the guest");
  expect(Date.now() - started).toBeGreaterThanOrEqual(250);
  const second = await fetchRaw(`${origin}/`);
  expect(second.body.toString()).toBe("hello from the guest");
  expect(wakes).toBe(1);
});

test("a wake that fails is answered 503 with its reason, and nothing reaches the guest", async () => {
  await using gateway = testGateway({ wake: () => Promise.reject(new Error("the disk is full")) });
  const { origin } = await gateway.open({ key: "web", guestPort: guest.port, links: [] });
  const before = guestRequests;
  const answer = await fetchRaw(`${origin}/`);
  expect(answer.status).toBe(503);
  expect(answer.body.toString()).toContain("could not wake its instance: the disk is full");
  expect(guestRequests).toBe(before);
});

test("a refused request is no activity; an answered one is seen and no longer open", async () => {
  await using gateway = testGateway();
  const { origin, hostPort } = await gateway.open({ key: "web", guestPort: guest.port, links: [] });
  expect(gateway.activity()).toEqual({ open: 0, seen: 0, requests: 0, upgrades: 0, bytesIn: 0, bytesOut: 0 });
  const refused = await fetchRaw(`${origin}/`, { headers: { host: `evil.example:${hostPort}` } });
  expect(refused.status).toBe(403);
  expect(gateway.activity()).toMatchObject({ open: 0, seen: 0, requests: 0, upgrades: 0 });
  const before = gateway.activity();
  const answer = await fetchRaw(`${origin}/`);
  await sleep(50);
  const after = gateway.activity();
  expect(after).toMatchObject({ open: 0, requests: 1, upgrades: 0 });
  expect(after.seen).toBeGreaterThan(0);
  // Its connection's bytes: at least the answer's body came out, and a request went in.
  expect(after.bytesOut - before.bytesOut).toBeGreaterThan(answer.body.length);
  expect(after.bytesIn).toBeGreaterThan(before.bytesIn);
});

describe("an open WebSocket", () => {
  let server: Server;
  let wss: WebSocketServer;
  let gateway: PreviewGateway;
  let origin: string;

  beforeAll(async () => {
    server = createServer((_req, res) => res.end("plain"));
    wss = new WebSocketServer({ server });
    wss.on("connection", (ws) => ws.send("hi"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    gateway = testGateway({ wake: () => sleep(100) });
    const port = (server.address() as { port: number }).port;
    ({ origin } = await gateway.open({ key: "ws", guestPort: port, links: [] }));
  });

  afterAll(async () => {
    await gateway.closeAll();
    for (const client of wss.clients) client.terminate();
    await new Promise<void>((resolve) => wss.close(() => resolve()));
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  test("waits for the wake, then counts as open activity until its client closes it", async () => {
    const ws = new WebSocket(`${origin.replace("http", "ws")}/live`);
    const greeting = new Promise<string>((resolve, reject) => {
      ws.once("message", (data: Buffer) => resolve(data.toString()));
      ws.once("error", reject);
    });
    expect(await greeting).toBe("hi");
    await sleep(200);
    expect(gateway.activity().open).toBe(1);
    const seen = gateway.activity().seen;
    ws.close();
    await new Promise((resolve) => ws.once("close", resolve));
    await sleep(100);
    expect(gateway.activity().open).toBe(0);
    expect(gateway.activity().seen).toBeGreaterThan(seen);
    expect(gateway.activity()).toMatchObject({ requests: 0, upgrades: 1 });
  });
});
