// HTTP through a preview as a browser sees it: status, headers and bodies intact both ways (large,
// chunked, bodiless, close-delimited), and a guest that is down, broken or slow answered as a 502/504.
import { createHash, randomBytes } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { PreviewGateway } from "../src/index.js";
import {
  fetchRaw,
  httpStandIn,
  memoryLogger,
  rawExchange,
  rawStandIn,
  testGateway,
  type StandIn,
} from "./support/helpers.js";

const sha = (data: Buffer) => createHash("sha256").update(data).digest("hex");

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

describe.each([
  ["net.Socket connector", false],
  ["plain Duplex connector", true],
])("HTTP through a preview (%s)", (_name, plainDuplex) => {
  let guest: StandIn;
  let gateway: PreviewGateway;
  let origin: string;
  const seen: { method?: string; url?: string; headers?: IncomingMessage["headers"]; sha?: string; length?: number }[] =
    [];

  beforeAll(async () => {
    guest = await httpStandIn(async (req, res) => {
      const body = await readBody(req);
      seen.push({ method: req.method, url: req.url, headers: req.headers, sha: sha(body), length: body.length });
      if (req.url === "/echo") {
        res.writeHead(200, { "content-type": "application/octet-stream", "content-length": body.length });
        res.end(body);
      } else if (req.url === "/chunked") {
        res.writeHead(200, { "content-type": "text/plain" });
        for (let i = 0; i < 5; i++) res.write(`part ${i}\n`);
        res.end();
      } else if (req.url === "/cookies") {
        res.setHeader("set-cookie", ["a=1", "b=2"]);
        res.setHeader("x-custom", "yes");
        res.end("ok");
      } else if (req.url === "/empty") {
        res.writeHead(204);
        res.end();
      } else if (req.url === "/not-modified") {
        res.writeHead(304, { etag: '"x"' });
        res.end();
      } else {
        res.writeHead(200, { "content-type": "text/plain", "content-length": 5 });
        res.end("hello");
      }
    });
    gateway = testGateway({ plainDuplex });
    ({ origin } = await gateway.open({ key: "web", guestPort: guest.port, links: [{ url: "/", title: "web" }] }));
  });

  afterAll(async () => {
    await gateway.closeAll();
    await guest.close();
  });

  test("GET returns the guest's status, headers and body, with Host kept", async () => {
    const res = await fetchRaw(`${origin}/hello?q=1`);
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe("hello");
    expect(res.headers["content-length"]).toBe("5");
    const request = seen.at(-1)!;
    expect(request.url).toBe("/hello?q=1");
    expect(request.headers?.host).toBe(new URL(origin).host);
  });

  test("multi-value headers (set-cookie) survive", async () => {
    const res = await fetchRaw(`${origin}/cookies`);
    expect(res.headers["set-cookie"]).toEqual(["a=1", "b=2"]);
    expect(res.headers["x-custom"]).toBe("yes");
  });

  test("POST of 10 MiB with content-length arrives intact and echoes back intact", async () => {
    const data = randomBytes(10 * 1024 * 1024);
    const res = await fetchRaw(`${origin}/echo`, { method: "POST", body: data });
    expect(res.status).toBe(200);
    expect(seen.at(-1)!.sha).toBe(sha(data));
    expect(res.headers["content-length"]).toBe(String(data.length));
    expect(sha(res.body)).toBe(sha(data));
  });

  test("a chunked upload is forwarded whole", async () => {
    const data = randomBytes(300_000);
    const res = await fetchRaw(`${origin}/echo`, {
      method: "PUT",
      headers: { "transfer-encoding": "chunked" },
      body: data,
    });
    expect(res.status).toBe(200);
    expect(seen.at(-1)!.headers?.["transfer-encoding"]).toBe("chunked");
    expect(sha(res.body)).toBe(sha(data));
  });

  test("a chunked response arrives whole", async () => {
    const res = await fetchRaw(`${origin}/chunked`);
    expect(res.headers["transfer-encoding"]).toBe("chunked");
    expect(res.body.toString()).toBe("part 0\npart 1\npart 2\npart 3\npart 4\n");
  });

  test("HEAD, 204 and 304 keep their bodyless framing", async () => {
    const head = await fetchRaw(`${origin}/hello`, { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(head.headers["content-length"]).toBe("5");
    expect(head.body.length).toBe(0);
    expect((await fetchRaw(`${origin}/empty`)).status).toBe(204);
    const notModified = await fetchRaw(`${origin}/not-modified`);
    expect(notModified.status).toBe(304);
    expect(notModified.headers.etag).toBe('"x"');
  });

  test("hop-by-hop request headers are not forwarded; end-to-end ones are", async () => {
    await fetchRaw(`${origin}/hello`, {
      headers: { connection: "keep-alive, x-hop", "x-hop": "1", "keep-alive": "timeout=5", "x-end": "2" },
    });
    const headers = seen.at(-1)!.headers!;
    expect(headers["x-hop"]).toBeUndefined();
    expect(headers["keep-alive"]).toBeUndefined();
    expect(headers["x-end"]).toBe("2");
  });

  test("100 concurrent connections all get their own answer", async () => {
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        fetchRaw(`${origin}/echo`, { method: "POST", body: `request ${i}` }).then((r) => r.body.toString()),
      ),
    );
    expect(results).toEqual(Array.from({ length: 100 }, (_, i) => `request ${i}`));
  });
});

describe("close-delimited and broken guest responses", () => {
  let guest: StandIn;
  let gateway: PreviewGateway;
  let origin: string;
  const big = randomBytes(1024 * 1024);

  beforeAll(async () => {
    guest = await rawStandIn((socket) => {
      socket.once("data", (data: Buffer) => {
        const path = data.toString("latin1").split(" ")[1];
        if (path === "/http10") {
          // HTTP/1.0 style: no length, no chunking, body ends when the connection closes.
          socket.write("HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n");
          let offset = 0;
          const pump = () => {
            if (offset >= big.length) return void socket.end();
            socket.write(big.subarray(offset, offset + 100_000));
            offset += 100_000;
            setTimeout(pump, 5);
          };
          pump();
        } else if (path === "/close11") {
          socket.end("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: text/plain\r\n\r\nuntil the end");
        } else if (path === "/short") {
          socket.write("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
          socket.write("x".repeat(500), () => socket.destroy());
        } else if (path === "/reset") {
          socket.write("HTTP/1.0 200 OK\r\n\r\n");
          socket.write("partial", () => setTimeout(() => socket.resetAndDestroy(), 50));
        } else if (path === "/garbage") {
          socket.end("NOT HTTP AT ALL\r\n\r\n");
        } else if (path === "/silent-close") {
          socket.destroy();
        }
      });
    });
    gateway = testGateway({ logger: memoryLogger() });
    ({ origin } = await gateway.open({ key: "raw", guestPort: guest.port, links: [] }));
  });

  afterAll(async () => {
    await gateway.closeAll();
    await guest.close();
  });

  test("an HTTP/1.0 close-delimited body is forwarded whole, re-chunked, ended at guest EOF", async () => {
    const res = await fetchRaw(`${origin}/http10`);
    expect(res.status).toBe(200);
    expect(res.headers["transfer-encoding"]).toBe("chunked");
    expect(sha(res.body)).toBe(sha(big));
  });

  test("an HTTP/1.1 Connection: close body without length is forwarded whole", async () => {
    const res = await fetchRaw(`${origin}/close11`);
    expect(res.body.toString()).toBe("until the end");
    expect(res.headers["transfer-encoding"]).toBe("chunked");
  });

  test("a body cut short of its content-length fails on the client, not a silent success", async () => {
    await expect(fetchRaw(`${origin}/short`)).rejects.toThrow();
  });

  test("a close-delimited body ended by a reset fails on the client", async () => {
    await expect(fetchRaw(`${origin}/reset`)).rejects.toThrow();
  });

  test("a raw look at the reset case: no terminating chunk is sent", async () => {
    const port = new URL(origin).port;
    const text = await rawExchange(Number(port), `GET /reset HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
    expect(text.toLowerCase()).toContain("transfer-encoding: chunked");
    expect(text).toContain("partial");
    expect(text.endsWith("0\r\n\r\n")).toBe(false);
  });

  test("a non-HTTP answer becomes a 502 that says so", async () => {
    const res = await fetchRaw(`${origin}/garbage`);
    expect(res.status).toBe(502);
    expect(res.body.toString()).toMatch(/invalid HTTP\/1\.1 response/);
  });

  test("a guest closing without answering becomes a 502", async () => {
    const res = await fetchRaw(`${origin}/silent-close`);
    expect(res.status).toBe(502);
    expect(res.body.toString()).toMatch(/closed the connection before sending a response/);
  });
});

describe("guest port not listening", () => {
  test("502 names the preview and guest port and points to the service's logs", async () => {
    const closedGuest = await rawStandIn(() => undefined);
    const port = closedGuest.port;
    await closedGuest.close();
    const logger = memoryLogger();
    await using gateway = testGateway({ logger });
    const preview = await gateway.open({ key: "api", guestPort: port, links: [{ url: "/", title: "API" }] });
    const res = await fetchRaw(`${preview.origin}/`);
    expect(res.status).toBe(502);
    const text = res.body.toString();
    expect(text).toContain("Preview api");
    expect(text).toContain(`guest port ${port}`);
    expect(text).toMatch(/ECONNREFUSED/);
    expect(text).toMatch(/logs of service api/);
    expect(
      logger.lines.some((line) => line.startsWith("warn [preview api]") && line.includes(`guest port ${port}`)),
    ).toBe(true);
  });
});

describe("an upload the guest refuses before reading it", () => {
  test("the client gets the guest's answer and close is not blocked", async () => {
    const guest = await httpStandIn((_req, res) => {
      res.writeHead(413, { "content-type": "text/plain", connection: "close" });
      res.end("too large");
    });
    const gateway = testGateway();
    const { origin } = await gateway.open({ key: "up", guestPort: guest.port, links: [] });
    const res = await fetchRaw(`${origin}/upload`, { method: "POST", body: randomBytes(8 * 1024 * 1024) }).catch(
      (error: Error) => error,
    );
    // Over loopback TCP the guest's reset usually destroys its answer before undici reads it: then
    // the client gets a 502 that explains, never a stall.
    if (res instanceof Error) throw res;
    if (res.status === 413) {
      expect(res.body.toString()).toBe("too large");
    } else {
      expect(res.status).toBe(502);
      expect(res.body.toString()).toMatch(/closed the connection before reading the whole request body/);
    }
    const started = Date.now();
    await gateway.closeAll();
    expect(Date.now() - started).toBeLessThan(2_000);
    await guest.close();
  });
});

describe("guest slower than the headers deadline", () => {
  test("504 says how long we waited and where to look", async () => {
    const guest = await httpStandIn(() => undefined);
    await using gateway = testGateway({ headersTimeoutMs: 300 });
    const { origin } = await gateway.open({ key: "slow", guestPort: guest.port, links: [] });
    const res = await fetchRaw(`${origin}/`);
    expect(res.status).toBe(504);
    expect(res.body.toString()).toMatch(/Preview slow: guest port \d+ sent no response headers within 300 ms/);
    await guest.close();
  });
});
