// WebSockets through a preview: messages both ways with the subprotocol kept end to end, upgrades
// from a foreign Host or page origin refused, and a closing gateway cutting open sockets at once.
import { createServer, type Server } from "node:http";
import { WebSocket, WebSocketServer } from "ws";
import { PreviewGateway } from "../src/index.js";
import { rawExchange, testGateway } from "./support/helpers.js";

function opened(ws: WebSocket): Promise<void> {
  return new Promise((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`unexpected response ${res.statusCode}`)));
  });
}

function nextMessage(ws: WebSocket): Promise<{ data: Buffer; binary: boolean }> {
  return new Promise((resolve) => ws.once("message", (data: Buffer, binary: boolean) => resolve({ data, binary })));
}

function refusedStatus(ws: WebSocket): Promise<number> {
  return new Promise((resolve, reject) => {
    ws.once("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
    ws.once("open", () => reject(new Error("upgrade was accepted")));
    ws.once("error", () => undefined);
  });
}

describe.each([
  ["net.Socket connector", false],
  ["plain Duplex connector", true],
])("WebSocket through a preview (%s)", (_name, plainDuplex) => {
  let server: Server;
  let wss: WebSocketServer;
  let gateway: PreviewGateway;
  let origin: string;
  const protocols: string[] = [];

  beforeAll(async () => {
    server = createServer((_req, res) => res.end("plain"));
    wss = new WebSocketServer({ server, handleProtocols: (offered) => [...offered][0] ?? false });
    wss.on("connection", (ws, req) => {
      protocols.push(ws.protocol);
      ws.send(`hello ${req.url}`);
      ws.on("message", (data, binary) => ws.send(data, { binary }));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    gateway = testGateway({ plainDuplex });
    const port = (server.address() as { port: number }).port;
    ({ origin } = await gateway.open({ key: "ws", guestPort: port, links: [] }));
  });

  afterAll(async () => {
    await gateway.closeAll();
    for (const client of wss.clients) client.terminate();
    await new Promise<void>((resolve) => wss.close(() => resolve()));
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  test("echo both ways: server-initiated, text and binary, with subprotocol negotiated end to end", async () => {
    const ws = new WebSocket(`${origin.replace("http", "ws")}/socket?x=1`, ["chat.v1"]);
    const greeting = nextMessage(ws);
    await opened(ws);
    expect((await greeting).data.toString()).toBe("hello /socket?x=1");
    expect(ws.protocol).toBe("chat.v1");
    expect(protocols.at(-1)).toBe("chat.v1");

    const text = nextMessage(ws);
    ws.send("ping");
    expect((await text).data.toString()).toBe("ping");

    const payload = Buffer.alloc(1024 * 1024, 7);
    const binary = nextMessage(ws);
    ws.send(payload);
    const echoed = await binary;
    expect(echoed.binary).toBe(true);
    expect(echoed.data.equals(payload)).toBe(true);

    const closed = new Promise<number>((resolve) => ws.once("close", (code) => resolve(code)));
    ws.close(1000, "bye");
    expect(await closed).toBe(1000);
  });

  test("a browser page on a loopback origin may connect", async () => {
    const ws = new WebSocket(`${origin.replace("http", "ws")}/`, { headers: { origin } });
    const greeting = nextMessage(ws);
    await opened(ws);
    expect((await greeting).data.toString()).toBe("hello /");
    ws.terminate();
  });

  test("an upgrade with a foreign Host (DNS rebinding) is refused with 403", async () => {
    const port = Number(new URL(origin).port);
    const ws = new WebSocket(`${origin.replace("http", "ws")}/`, { headers: { host: `evil.example:${port}` } });
    expect(await refusedStatus(ws)).toBe(403);
  });

  test("an upgrade from a foreign page origin is refused with 403", async () => {
    const ws = new WebSocket(`${origin.replace("http", "ws")}/`, { headers: { origin: "https://evil.example" } });
    expect(await refusedStatus(ws)).toBe(403);
  });

  test("closing the gateway cuts an open WebSocket promptly", async () => {
    const extra = testGateway({ plainDuplex });
    const port = (server.address() as { port: number }).port;
    const preview = await extra.open({ key: "ws2", guestPort: port, links: [] });
    const ws = new WebSocket(`${preview.origin.replace("http", "ws")}/`);
    await opened(ws);
    const closed = new Promise<void>((resolve) => ws.once("close", () => resolve()));
    const started = Date.now();
    await extra.closeAll();
    await closed;
    expect(Date.now() - started).toBeLessThan(2_000);
  });
});

describe("WebSocket to a guest port with nothing listening", () => {
  test("the upgrade gets a 502 that names the port", async () => {
    const gateway = testGateway();
    try {
      const { origin, hostPort } = await gateway.open({ key: "dead", guestPort: 1, links: [] });
      expect(origin).toBe(`http://127.0.0.1:${hostPort}`);
      const text = await rawExchange(
        hostPort,
        `GET / HTTP/1.1\r\nHost: 127.0.0.1:${hostPort}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`,
      );
      expect(text).toMatch(/^HTTP\/1\.1 502 /);
      expect(text).toContain("guest port 1");
    } finally {
      await gateway.closeAll();
    }
  });
});
