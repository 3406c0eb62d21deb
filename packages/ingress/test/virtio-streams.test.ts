import { createHash, randomBytes } from "node:crypto";
import { request as httpRequest } from "node:http";
import { WebSocket, WebSocketServer } from "ws";
import { createServer } from "node:http";
import { PreviewGateway } from "../src/index.js";
import { rawStandIn, virtioLikeConnector, type StandIn } from "./helpers.js";

// Gondolin's guest streams end by pushing EOF and destroying themselves at once. A reader that is
// paused at that moment (undici under backpressure from a slow client) must still get every byte.

const sha = (data: Buffer) => createHash("sha256").update(data).digest("hex");
const body = randomBytes(32 * 1024 * 1024);

/** GETs `url`, waits `pauseMs` after the headers before reading, then reads everything. */
function slowFetch(url: string, pauseMs: number): Promise<{ status: number; body: Buffer; complete: boolean }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { agent: false });
    req.on("error", reject);
    req.on("response", (res) => {
      res.pause();
      const chunks: Buffer[] = [];
      setTimeout(() => {
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("error", () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks), complete: false }));
        res.on("end", () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks), complete: res.complete }));
        res.resume();
      }, pauseMs);
    });
    req.end();
  });
}

describe("guest streams that destroy themselves at EOF", () => {
  let guest: StandIn;
  let gateway: PreviewGateway;
  let origin: string;

  beforeAll(async () => {
    guest = await rawStandIn((socket) => {
      socket.once("data", (data: Buffer) => {
        const path = data.toString("latin1").split(" ")[1];
        if (path === "/framed") {
          socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`);
        } else {
          socket.write("HTTP/1.0 200 OK\r\n\r\n");
        }
        socket.end(body);
      });
    });
    gateway = new PreviewGateway({ connector: virtioLikeConnector() });
    ({ origin } = await gateway.open({ key: "virtio", guestPort: guest.port, links: [] }));
  });

  afterAll(async () => {
    await gateway.closeAll();
    await guest.close();
  });

  test("a framed response read by a slow client arrives whole", async () => {
    const res = await slowFetch(`${origin}/framed`, 1_000);
    expect(res.complete).toBe(true);
    expect(res.body.length).toBe(body.length);
    expect(sha(res.body)).toBe(sha(body));
  });

  test("a close-delimited response read by a slow client arrives whole", async () => {
    const res = await slowFetch(`${origin}/close-delimited`, 1_000);
    expect(res.complete).toBe(true);
    expect(res.body.length).toBe(body.length);
    expect(sha(res.body)).toBe(sha(body));
  });

  test("WebSocket messages sent just before the guest closes still reach the client", async () => {
    const server = createServer();
    const wss = new WebSocketServer({ server });
    const burst = Array.from({ length: 50 }, (_, i) => `m${i}-${"x".repeat(20_000)}`);
    wss.on("connection", (ws) => {
      for (const message of burst) ws.send(message);
      ws.close(1000, "done");
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const gw = new PreviewGateway({ connector: virtioLikeConnector() });
    try {
      const preview = await gw.open({ key: "ws", guestPort: (server.address() as { port: number }).port, links: [] });
      const received: string[] = [];
      const code = await new Promise<number>((resolve, reject) => {
        const ws = new WebSocket(`${preview.origin.replace("http:", "ws:")}/`);
        ws.on("message", (data: Buffer) => received.push(data.toString()));
        ws.on("close", (closeCode) => resolve(closeCode));
        ws.on("error", reject);
      });
      expect(received).toEqual(burst);
      expect(code).toBe(1000);
    } finally {
      await gw.closeAll();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
