// Dev-server realism: a first request that compiles for a minute, and an SSE stream that stays
// open. Both run at once to keep the suite near one minute.
import { request as httpRequest } from "node:http";
import { PreviewGateway } from "../src/index.js";
import { fetchRaw, httpStandIn, testGateway, type StandIn } from "./support/helpers.js";

const sseSeconds = 30;
const slowFirstResponseMs = 60_000;

let guest: StandIn;
let gateway: PreviewGateway;
let origin: string;

beforeAll(async () => {
  let compiled = false;
  guest = await httpStandIn((req, res) => {
    if (req.url === "/events") {
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      let n = 0;
      const timer = setInterval(() => {
        res.write(`data: tick ${n++}\n\n`);
        if (n === sseSeconds) {
          clearInterval(timer);
          res.end();
        }
      }, 1_000);
      req.on("close", () => clearInterval(timer));
    } else if (req.url === "/first") {
      if (compiled) return void res.end("fast");
      setTimeout(() => {
        compiled = true;
        res.end("compiled");
      }, slowFirstResponseMs);
    }
  });
  gateway = testGateway();
  ({ origin } = await gateway.open({ key: "dev", guestPort: guest.port, links: [] }));
});

afterAll(async () => {
  await gateway.closeAll();
  await guest.close();
});

test.concurrent(
  `an SSE stream delivers one event per second for ${sseSeconds} s, each as it is sent`,
  async () => {
    const arrivals: number[] = [];
    const events: string[] = [];
    const started = Date.now();
    await new Promise<void>((resolve, reject) => {
      const req = httpRequest(`${origin}/events`, { agent: false });
      req.on("error", reject);
      req.on("response", (res) => {
        expect(res.headers["content-type"]).toBe("text/event-stream");
        let buffer = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          buffer += chunk;
          for (let i = buffer.indexOf("\n\n"); i >= 0; i = buffer.indexOf("\n\n")) {
            events.push(buffer.slice(0, i));
            arrivals.push(Date.now() - started);
            buffer = buffer.slice(i + 2);
          }
        });
        res.on("end", () => resolve());
        res.on("error", reject);
      });
      req.end();
    });
    expect(events).toEqual(Array.from({ length: sseSeconds }, (_, i) => `data: tick ${i}`));
    // Streamed, not buffered: event n arrives about n+1 seconds in, not all at the end.
    expect(arrivals[0]).toBeLessThan(3_000);
    expect(arrivals[sseSeconds - 1]! - arrivals[0]!).toBeGreaterThan((sseSeconds - 3) * 1_000);
  },
  sseSeconds * 1_000 + 20_000,
);

test.concurrent(
  "a first response that takes a minute (dev server compiling) still arrives",
  async () => {
    const started = Date.now();
    const res = await fetchRaw(`${origin}/first`);
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe("compiled");
    expect(Date.now() - started).toBeGreaterThanOrEqual(slowFirstResponseMs - 100);
  },
  slowFirstResponseMs + 20_000,
);
