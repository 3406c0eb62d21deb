// The suite both guest-server tests share: HTTP, WebSocket and a stop with hung clients through a
// preview to the Python fixture, on the host (python-guest.test.ts) and in a real VM
// (ingress.vm.test.ts), with the same expectations.
import { createHash, randomBytes } from "node:crypto";
import { request as httpRequest } from "node:http";
import { Socket } from "node:net";
import { WebSocket } from "ws";
import type { GuestConnector, PreviewGateway } from "../../src/index.js";
import { PreviewGateway as Gateway } from "../../src/index.js";
import { closedWithin, fetchRaw } from "./helpers.js";

/** What the shared suite needs: a running `guest_server.py` (beside this file) and a way to reach it. */
export interface GuestSuiteTarget {
  /** Connector to the place the fixture runs (host loopback or a VM). */
  connector: GuestConnector;
  /** Port the fixture listens on there. */
  guestPort: number;
}

/** Sizes scaled to the target (a TCG guest is much slower than the host). */
export interface GuestSuiteSizes {
  uploadBytes: number;
  downloadBytes: number;
  /** A close-delimited download the client leaves unread for `afterMs` after its headers. */
  lateRead: { bytes: number; afterMs: number };
  concurrent: number;
  /** Bound for closeAll with hung clients, in ms. */
  closeWithinMs: number;
}

const sha = (data: Buffer) => createHash("sha256").update(data).digest("hex");

/**
 * HTTP, WebSocket and stop-with-hung-clients against the Python fixture: run once with the fixture
 * on this host and once inside a real VM, with the same expectations.
 */
export function guestServerSuite(target: () => GuestSuiteTarget, sizes: GuestSuiteSizes): void {
  let gateway: PreviewGateway;
  let origin: string;

  beforeAll(async () => {
    const { connector, guestPort } = target();
    gateway = new Gateway({ connector });
    ({ origin } = await gateway.open({ key: "web", guestPort, links: [{ url: "/hello", title: "hello" }] }));
  });

  afterAll(async () => {
    await gateway?.closeAll();
  });

  test("GET with a content-length response", async () => {
    const res = await fetchRaw(`${origin}/hello`);
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe("hello from the guest");
  });

  test("POST bodies arrive intact and come back intact", async () => {
    for (const size of [1, 64 * 1024, sizes.uploadBytes]) {
      const data = randomBytes(size);
      const res = await fetchRaw(`${origin}/echo`, { method: "POST", body: data });
      expect(res.status).toBe(200);
      expect(res.headers["x-body-sha256"]).toBe(sha(data));
      expect(sha(res.body)).toBe(sha(data));
    }
  });

  test("a chunked download arrives whole", async () => {
    const res = await fetchRaw(`${origin}/bytes?n=${sizes.downloadBytes}`);
    expect(res.body.length).toBe(sizes.downloadBytes);
    expect(sha(res.body)).toBe(res.headers["x-body-sha256"]);
  });

  test("a close-delimited download arrives whole and re-chunked", async () => {
    const res = await fetchRaw(`${origin}/close-delimited?n=${sizes.downloadBytes}`);
    expect(res.headers["transfer-encoding"]).toBe("chunked");
    expect(res.body.length).toBe(sizes.downloadBytes);
    expect(sha(res.body)).toBe(res.headers["x-body-sha256"]);
  });

  test("a close-delimited download that the client starts reading late arrives whole", async () => {
    // The guest may write everything and close while the client, and so the proxy, is not reading.
    const { bytes, afterMs } = sizes.lateRead;
    const res = await fetchRaw(`${origin}/close-delimited?n=${bytes}`, { readAfterMs: afterMs });
    expect(res.body.length).toBe(bytes);
    expect(sha(res.body)).toBe(res.headers["x-body-sha256"]);
  });

  test("many small close-delimited responses all arrive whole (the guest closes right after writing)", async () => {
    for (let batch = 0; batch < 4; batch++) {
      const sizesInBatch = Array.from({ length: 10 }, (_, i) => 1 + batch * 977 + i * 131);
      const results = await Promise.all(sizesInBatch.map((n) => fetchRaw(`${origin}/close-delimited?n=${n}`)));
      results.forEach((res, i) => {
        expect(res.body.length).toBe(sizesInBatch[i]);
        expect(sha(res.body)).toBe(res.headers["x-body-sha256"]);
      });
    }
  });

  test("concurrent requests each get their answer", async () => {
    const bodies = await Promise.all(
      Array.from({ length: sizes.concurrent }, (_, i) =>
        fetchRaw(`${origin}/echo`, { method: "POST", body: `n${i}` }).then((r) => r.body.toString()),
      ),
    );
    expect(bodies).toEqual(Array.from({ length: sizes.concurrent }, (_, i) => `n${i}`));
  });

  test("WebSocket: the guest greets, then text and binary echo both ways", async () => {
    const ws = new WebSocket(`${origin.replace("http:", "ws:")}/ws`);
    const messages: Buffer[] = [];
    const waiters: (() => void)[] = [];
    ws.on("message", (data: Buffer) => {
      messages.push(data);
      waiters.shift()?.();
    });
    const next = () =>
      new Promise<Buffer>((resolve) => {
        if (messages.length > 0) return resolve(messages.shift()!);
        waiters.push(() => resolve(messages.shift()!));
      });
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("error", reject);
    });
    expect((await next()).toString()).toBe("hello");
    ws.send("ping");
    expect((await next()).toString()).toBe("ping");
    const blob = randomBytes(256 * 1024);
    ws.send(blob);
    expect(sha(await next())).toBe(sha(blob));
    const closed = new Promise<number>((resolve) => ws.once("close", (code) => resolve(code)));
    ws.close(1000);
    expect(await closed).toBe(1000);
  });

  test("stop cuts a WebSocket, a hung upload, a request the guest never answers and an idle keep-alive client", async () => {
    const { connector, guestPort } = target();
    const stopping = new Gateway({ connector });
    const { origin: o, hostPort } = await stopping.open({ key: "stop", guestPort, links: [] });

    const ws = new WebSocket(`${o.replace("http:", "ws:")}/ws`);
    ws.on("error", () => undefined);
    await new Promise<void>((resolve) => ws.once("message", () => resolve()));
    const wsClosed = new Promise<void>((resolve) => ws.once("close", () => resolve()));

    const upload = new Socket();
    upload.on("error", () => undefined);
    await new Promise<void>((resolve) => upload.connect(hostPort, "127.0.0.1", resolve));
    upload.write(`POST /upload-hang HTTP/1.1\r\nHost: 127.0.0.1:${hostPort}\r\nContent-Length: 104857600\r\n\r\n`);
    upload.write(Buffer.alloc(128 * 1024));

    const hanging = httpRequest(`${o}/hang`, { agent: false });
    hanging.on("error", () => undefined);
    const hangingClosed = new Promise<void>((resolve) => hanging.once("close", () => resolve()));
    hanging.end();

    const idle = new Socket();
    idle.on("error", () => undefined);
    await new Promise<void>((resolve) => idle.connect(hostPort, "127.0.0.1", resolve));
    idle.write(`GET /hello HTTP/1.1\r\nHost: 127.0.0.1:${hostPort}\r\n\r\n`);
    await new Promise((resolve) => idle.once("data", resolve));

    await new Promise((resolve) => setTimeout(resolve, 500));
    const allCut = Promise.all([
      wsClosed,
      hangingClosed,
      closedWithin(upload, sizes.closeWithinMs),
      closedWithin(idle, sizes.closeWithinMs),
    ]);
    const started = Date.now();
    await stopping.closeAll();
    expect(Date.now() - started).toBeLessThan(sizes.closeWithinMs);
    await allCut;

    // The guest server is unharmed: the main preview still works.
    expect((await fetchRaw(`${origin}/hello`)).status).toBe(200);
  });
}
