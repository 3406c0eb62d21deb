// The bytes each way of the guest's HTTP(S) exchanges (counting-fetch.ts): through the egress
// policy's fetch against a real HTTP server on loopback, and around a fake upstream for aborts and
// for how far ahead of the guest a large body is read.
import http from "node:http";
import type net from "node:net";
import { Response } from "undici";
import { countingFetch, type EgressBytes } from "../src/egress/counting-fetch.js";
import { egressPolicy, type EgressEvent } from "../src/egress/egress-policy.js";
import { loadGondolin } from "../src/gondolin-loader.js";

let server: http.Server;
let port: number;

beforeAll(async () => {
  // GET /bytes/N answers N bytes in 1000-byte writes (chunked); POST answers how many it read.
  server = http.createServer((req, res) => {
    if (req.method === "POST") {
      let read = 0;
      req.on("data", (chunk: Buffer) => (read += chunk.length));
      req.on("end", () => res.end(`read ${read}`));
      return;
    }
    const size = Number(req.url!.split("/")[2]);
    const chunk = Buffer.alloc(1000, 0x61);
    for (let sent = 0; sent < size; sent += chunk.length) res.write(chunk.subarray(0, Math.min(1000, size - sent)));
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as net.AddressInfo).port;
});

afterAll(() => server.close());

async function policyFetch() {
  const events: EgressEvent[] = [];
  const policy = egressPolicy(await loadGondolin(), {
    allowedHosts: ["127.0.0.1"],
    allowedInternalHosts: ["127.0.0.1"],
    onEvent: (event) => events.push(event),
  });
  return { fetch: policy.fetch!, events, close: policy.close };
}

/** A stream of `total` bytes in `chunk`-sized pieces made as they are pulled; `made` counts them. */
function lazyBody(total: number, chunk: Uint8Array, made: { chunks: number }): ReadableStream<Uint8Array> {
  let left = total;
  return new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        if (left === 0) return controller.close();
        const piece = left >= chunk.byteLength ? chunk : chunk.subarray(0, left);
        left -= piece.byteLength;
        made.chunks++;
        controller.enqueue(piece);
      },
    },
    { highWaterMark: 0 },
  );
}

test("a streamed request body and a chunked response body are counted exactly, once the exchange ends", async () => {
  const { fetch, events, close } = await policyFetch();
  try {
    const download = await fetch(`http://127.0.0.1:${port}/bytes/123457`, { method: "GET" });
    expect(events).toEqual([]); // not before the body has gone to the guest
    expect((await download.arrayBuffer()).byteLength).toBe(123457);
    const upload = await fetch(`http://127.0.0.1:${port}/upload`, {
      method: "POST",
      body: lazyBody(70_001, new Uint8Array(4096), { chunks: 0 }) as never,
      duplex: "half",
    });
    expect(await upload.text()).toBe("read 70001");
    const bytes = events.filter((event) => event.kind === "bytes");
    expect(bytes).toEqual([
      { kind: "bytes", host: "127.0.0.1", port, protocol: "http", method: "GET", bytesOut: 0, bytesIn: 123457 },
      { kind: "bytes", host: "127.0.0.1", port, protocol: "http", method: "POST", bytesOut: 70_001, bytesIn: 10 },
    ]);
  } finally {
    await close();
  }
});

test("an exchange whose body the guest abandons, or whose upstream is unreachable, is reported once", async () => {
  const { fetch, events, close } = await policyFetch();
  try {
    const response = await fetch(`http://127.0.0.1:${port}/bytes/500000`);
    const reader = response.body!.getReader();
    const first = await reader.read();
    await reader.cancel();
    const bytes = events.flatMap((event) => (event.kind === "bytes" ? [event] : []));
    expect(bytes).toHaveLength(1);
    expect(bytes[0]).toMatchObject({ method: "GET", bytesIn: first.value!.byteLength });
    expect(bytes[0]!.bytesIn).toBeLessThan(500000);

    // A closed port: the fetch rejects, and the exchange is reported with nothing carried.
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const closedPort = (closed.address() as net.AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    await expect(fetch(`http://127.0.0.1:${closedPort}/`)).rejects.toThrow();
    expect(events.filter((event) => event.kind === "bytes" && event.port === closedPort)).toEqual([
      { kind: "bytes", host: "127.0.0.1", port: closedPort, protocol: "http", method: "GET", bytesOut: 0, bytesIn: 0 },
    ]);
  } finally {
    await close();
  }
});

test("a failing response body ends the exchange once, with what reached the guest", async () => {
  const reports: EgressBytes[] = [];
  let sent = false;
  const failing = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (sent) return controller.error(new Error("upstream reset"));
      sent = true;
      controller.enqueue(new Uint8Array(300));
    },
  });
  const fetch = countingFetch(
    async () => new Response(failing as never),
    (bytes) => reports.push(bytes),
  );
  const reader = (await fetch("https://API.example:8443/x", { method: "put" })).body!.getReader();
  expect((await reader.read()).value!.byteLength).toBe(300);
  await expect(reader.read()).rejects.toThrow("upstream reset");
  expect(reports).toEqual([
    { host: "api.example", port: 8443, protocol: "https", method: "PUT", bytesOut: 0, bytesIn: 300 },
  ]);
});

test("a large body passes through a chunk at a time: the upstream is never read far ahead of the guest", async () => {
  const reports: EgressBytes[] = [];
  const made = { chunks: 0 };
  const chunk = new Uint8Array(64 * 1024);
  const total = 256 * 1024 * 1024 + 5;
  const fetch = countingFetch(
    async () => new Response(lazyBody(total, chunk, made) as never),
    (bytes) => reports.push(bytes),
  );
  const reader = (await fetch("http://big.example/")).body!.getReader();
  let read = 0;
  let chunks = 0;
  let mostAhead = 0;
  for (;;) {
    const next = await reader.read();
    if (next.done) break;
    read += next.value.byteLength;
    chunks++;
    mostAhead = Math.max(mostAhead, made.chunks - chunks);
  }
  expect(read).toBe(total);
  expect(mostAhead).toBeLessThanOrEqual(2);
  expect(reports).toEqual([
    { host: "big.example", port: 80, protocol: "http", method: "GET", bytesOut: 0, bytesIn: total },
  ]);
});
