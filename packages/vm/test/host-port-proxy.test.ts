// The HTTP/1.1 proxy that puts a secret into requests to a host port (host-port-proxy.ts), against
// real host HTTP servers on loopback: what the host service receives, what the client gets back.
import http from "node:http";
import net from "node:net";
import type { AddressInfo } from "node:net";
import zlib from "node:zlib";
import { HostPortProxies, forwardedHeaders, hostPortRoutes } from "../src/egress/host-port-proxy.js";
import { SecretStore, substituteHeader } from "../src/egress/secret-rules.js";

const REAL = "sk-real-value-NEVER-in-the-guest";
const PLACEHOLDER = "PI_SANDBOX_SECRET_0123456789abcdef";
const OTHER_REAL = "other-real-value";
const OTHER_PLACEHOLDER = "PI_SANDBOX_SECRET_fedcba9876543210";

interface Upstream {
  port: number;
  seen: http.IncomingHttpHeaders[];
  server: http.Server;
}

/** A host service that answers each request with the headers it got, as JSON. */
async function echoServer(handler?: http.RequestListener): Promise<Upstream> {
  const seen: http.IncomingHttpHeaders[] = [];
  const server = http.createServer((request, response) => {
    seen.push(request.headers);
    if (handler) return handler(request, response);
    request.resume();
    request.on("end", () => {
      response.writeHead(200, { "content-type": "application/json" });
      response.end(JSON.stringify(request.headers));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { port: (server.address() as AddressInfo).port, seen, server };
}

/** A loopback port with nothing listening. */
async function deadPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function get(
  port: number,
  headers: Record<string, string>,
  path = "/v1/models",
): Promise<{ status: number; body: string; headers: http.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const request = http.get({ host: "127.0.0.1", port, path, headers, agent: false }, (response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (body += chunk));
      response.on("end", () => resolve({ status: response.statusCode!, body, headers: response.headers }));
    });
    request.on("error", reject);
  });
}

/** The two secrets of these tests, as the VM holds them. */
function secretsStore(): SecretStore {
  const store = new SecretStore();
  store.add({ name: "KEY", placeholder: PLACEHOLDER, value: REAL, httpHosts: [] });
  store.add({ name: "OTHER", placeholder: OTHER_PLACEHOLDER, value: OTHER_REAL, httpHosts: [], headers: ["X-Other"] });
  return store;
}
let store = secretsStore();

let upstreams: Upstream[] = [];
let proxies: HostPortProxies | undefined;

afterEach(async () => {
  await proxies?.close();
  proxies = undefined;
  for (const upstream of upstreams) upstream.server.closeAllConnections();
  await Promise.all(upstreams.map((u) => new Promise((resolve) => u.server.close(resolve))));
  upstreams = [];
});

/** The secret uses the proxies told of (name and host), for the ledger. */
let uses: { secret: string; host: string }[] = [];

async function proxyFor(routes: Map<number, string[]>): Promise<HostPortProxies> {
  store = secretsStore();
  uses = [];
  proxies = await HostPortProxies.open(routes, store, (use) => uses.push(use));
  return proxies!;
}

test("routes: a secret goes to every host port for host.sandbox.internal, to one for :<port>, to none otherwise", () => {
  const routes = hostPortRoutes([8000, 9000], {
    ALL: { hosts: ["host.sandbox.internal"] },
    ONE: { hosts: ["api.example.com", "host.sandbox.internal:9000"] },
    WEB: { hosts: ["api.example.com"] },
  });
  expect([...routes]).toEqual([
    [8000, ["ALL"]],
    [9000, ["ALL", "ONE"]],
  ]);
});

test("header substitution: in credential headers only, inside Basic credentials; hop-by-hop headers dropped", () => {
  const list = [store.get("KEY")!];
  expect(substituteHeader("Authorization", `Bearer ${PLACEHOLDER}`, list)).toBe(`Bearer ${REAL}`);
  expect(substituteHeader("X-Api-Key", `${PLACEHOLDER},${PLACEHOLDER}`, list)).toBe(`${REAL},${REAL}`);
  const basic = `Basic ${Buffer.from(`user:${PLACEHOLDER}`).toString("base64")}`;
  expect(substituteHeader("authorization", basic, list)).toBe(
    `Basic ${Buffer.from(`user:${REAL}`).toString("base64")}`,
  );
  // Only credential headers; a header without a placeholder is the same string.
  expect(substituteHeader("x-other", basic, list)).toBe(basic);
  expect(substituteHeader("user-agent", `curl ${PLACEHOLDER}`, list)).toBe(`curl ${PLACEHOLDER}`);
  expect(substituteHeader("authorization", "Bearer nothing", list)).toBe("Bearer nothing");
  expect(
    forwardedHeaders(
      ["Host", "h", "Connection", "keep-alive, X-Drop", "X-Drop", "1", "Keep-Alive", "5", "X-Keep", "2"],
      list,
    ),
  ).toEqual(["Host", "h", "X-Keep", "2"]);
});

test("the host service gets the value (Bearer and Basic) on a listed port; a request without it passes unchanged", async () => {
  const upstream = await echoServer();
  upstreams.push(upstream);
  const proxy = await proxyFor(new Map([[upstream.port, ["KEY"]]]));
  const port = proxy.targets().get(upstream.port)!;
  expect(port).not.toBe(upstream.port);

  const bearer = await get(port, {
    authorization: `Bearer ${PLACEHOLDER}`,
    host: `host.sandbox.internal:${upstream.port}`,
  });
  expect(bearer.status).toBe(200);
  expect(upstream.seen[0]!.authorization).toBe(`Bearer ${REAL}`);
  expect(upstream.seen[0]!.host).toBe(`host.sandbox.internal:${upstream.port}`);

  await get(port, { authorization: `Basic ${Buffer.from(`u:${PLACEHOLDER}`).toString("base64")}` });
  expect(Buffer.from(upstream.seen[1]!.authorization!.slice(6), "base64").toString()).toBe(`u:${REAL}`);

  await get(port, { authorization: "Bearer the-guests-own", "x-custom": "kept" });
  expect(upstream.seen[2]).toMatchObject({ authorization: "Bearer the-guests-own", "x-custom": "kept" });

  store.update("KEY", "rotated-value");
  await get(port, { authorization: `Bearer ${PLACEHOLDER}` });
  expect(upstream.seen[3]!.authorization).toBe("Bearer rotated-value");
  // Each request that carried the secret out is told, by name and host port; the one without it is not.
  expect(uses).toEqual(Array(3).fill({ secret: "KEY", host: `host.sandbox.internal:${upstream.port}` }));
  expect(JSON.stringify(uses)).not.toContain(REAL);
});

test("a secret's own header gets its value; a placeholder in another header or for another port gets 403 and goes nowhere", async () => {
  const [a, b] = [await echoServer(), await echoServer()];
  upstreams.push(a, b);
  const proxy = await proxyFor(
    new Map([
      [a.port, ["KEY"]],
      [b.port, ["OTHER"]],
    ]),
  );
  const portB = proxy.targets().get(b.port)!;
  expect((await get(portB, { "x-other": OTHER_PLACEHOLDER })).status).toBe(200);
  expect(b.seen[0]).toMatchObject({ "x-other": OTHER_REAL });
  for (const headers of [
    { authorization: `Bearer ${PLACEHOLDER}` } as Record<string, string>, // KEY is not listed for port b
    { "user-agent": `tool/${OTHER_PLACEHOLDER}` }, // not a credential header
    { "x-other": PLACEHOLDER }, // x-other is OTHER's header, not KEY's
  ]) {
    const refused = await get(portB, headers);
    expect({ headers, status: refused.status }).toEqual({ headers, status: 403 });
    expect(refused.body).toMatch(/^pi-sandbox: request refused: secret (KEY|OTHER) may not be sent/);
  }
  const inUrl = await new Promise<number>((resolve, reject) => {
    http
      .get({ host: "127.0.0.1", port: portB, path: `/?key=${OTHER_PLACEHOLDER}`, agent: false }, (response) => {
        response.resume();
        resolve(response.statusCode!);
      })
      .on("error", reject);
  });
  expect(inUrl).toBe(403);
  expect(b.seen).toHaveLength(1);
  expect(a.seen).toHaveLength(0);
  // Only the request that went out carried a secret.
  expect(uses).toEqual([{ secret: "OTHER", host: `host.sandbox.internal:${b.port}` }]);
});

test("every answer comes back scrubbed: the value, its base64 and URL forms, in headers and in a compressed body", async () => {
  const b64 = Buffer.from(REAL).toString("base64");
  const upstream = await echoServer((request, response) => {
    request.resume();
    const text = `echo ${request.headers.authorization} b64=${b64} url=${encodeURIComponent(REAL)}`;
    response.writeHead(400, `Bad ${REAL}`, {
      "content-encoding": "gzip",
      "x-echo": REAL,
      "content-type": "text/plain",
    });
    response.end(zlib.gzipSync(text));
  });
  upstreams.push(upstream);
  const proxy = await proxyFor(new Map([[upstream.port, ["KEY"]]]));
  const answer = await get(proxy.targets().get(upstream.port)!, {
    authorization: `Bearer ${PLACEHOLDER}`,
    "accept-encoding": "gzip",
  });
  expect(upstream.seen[0]).toMatchObject({ authorization: `Bearer ${REAL}`, "accept-encoding": "identity" });
  expect(answer.status).toBe(400);
  expect(answer.headers["x-echo"]).toBe(PLACEHOLDER);
  expect(answer.headers["content-encoding"]).toBeUndefined();
  expect(answer.body).toBe(
    `echo Bearer ${PLACEHOLDER} b64=${Buffer.from(PLACEHOLDER).toString("base64")} url=${PLACEHOLDER}`,
  );
  expect(JSON.stringify(answer)).not.toContain(REAL);
});

test("a value the host service streams in two pieces, a moment apart, still reaches the guest as the placeholder", async () => {
  const upstream = await echoServer((request, response) => {
    request.resume();
    response.writeHead(200, { "content-type": "text/event-stream" });
    response.write(`data: ${REAL.slice(0, 7)}`);
    setTimeout(() => response.end(`${REAL.slice(7)} end\n\n`), 50);
  });
  upstreams.push(upstream);
  const proxy = await proxyFor(new Map([[upstream.port, ["KEY"]]]));
  const answer = await get(proxy.targets().get(upstream.port)!, {});
  expect(answer.body).toBe(`data: ${PLACEHOLDER} end\n\n`);
});

test("bodies stream both ways: an event reaches the client before the host service ends its answer", async () => {
  let releaseSecond!: () => void;
  const second = new Promise<void>((resolve) => (releaseSecond = resolve));
  let firstUploadChunk!: (text: string) => void;
  const uploaded = new Promise<string>((resolve) => (firstUploadChunk = resolve));
  const upstream = await echoServer((request, response) => {
    request.once("data", (chunk: Buffer) => firstUploadChunk(chunk.toString()));
    request.resume();
    response.writeHead(200, { "content-type": "text/event-stream" });
    response.write("data: one\n\n");
    void second.then(() => response.end("data: two\n\n"));
  });
  upstreams.push(upstream);
  const proxy = await proxyFor(new Map([[upstream.port, ["KEY"]]]));
  const received: string[] = [];
  const done = new Promise<http.IncomingMessage>((resolve, reject) => {
    const request = http.request(
      { host: "127.0.0.1", port: proxy.targets().get(upstream.port)!, method: "POST", path: "/v1/chat", agent: false },
      (response) => {
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => {
          received.push(chunk);
          if (chunk.includes("one")) releaseSecond();
        });
        response.on("end", () => resolve(response));
      },
    );
    request.on("error", reject);
    request.write("first-chunk");
    // The upload is still open when the host service sees its first chunk.
    void uploaded.then(() => request.end("rest"));
  });
  expect(await uploaded).toBe("first-chunk");
  const response = await done;
  expect(response.headers["content-type"]).toBe("text/event-stream");
  expect(received.join("")).toBe("data: one\n\ndata: two\n\n");
  expect(received[0]).toBe("data: one\n\n");
});

test("a request head over the bound gets 431; nothing listening on the host port gets a quick 502", async () => {
  const upstream = await echoServer();
  upstreams.push(upstream);
  const dead = await deadPort();
  const proxy = await proxyFor(
    new Map([
      [upstream.port, ["KEY"]],
      [dead, ["KEY"]],
    ]),
  );
  const big = await get(proxy.targets().get(upstream.port)!, { "x-big": "a".repeat(20 * 1024) });
  expect(big.status).toBe(431);
  expect(upstream.seen).toHaveLength(0);

  const started = performance.now();
  const refused = await get(proxy.targets().get(dead)!, { authorization: `Bearer ${PLACEHOLDER}` });
  expect(refused.status).toBe(502);
  expect(refused.body).toContain(`host port ${dead} did not answer (ECONNREFUSED)`);
  expect(refused.body).not.toContain(REAL);
  expect(performance.now() - started).toBeLessThan(2_000);
});

test("a value Node cannot send in a header gets 400, never quoted, and the proxy serves on", async () => {
  const upstream = await echoServer();
  upstreams.push(upstream);
  const proxy = await proxyFor(new Map([[upstream.port, ["KEY"]]]));
  const port = proxy.targets().get(upstream.port)!;
  store.update("KEY", "bad\u0001value");
  const refused = await get(port, { authorization: `Bearer ${PLACEHOLDER}` });
  expect(refused.status).toBe(400);
  expect(refused.body).toBe("pi-sandbox: the request could not be forwarded (ERR_INVALID_CHAR)\n");
  expect(upstream.seen).toHaveLength(0);
  store.update("KEY", REAL);
  expect((await get(port, { authorization: `Bearer ${PLACEHOLDER}` })).status).toBe(200);
});

test("close stops the proxies; no routes, no proxies", async () => {
  expect(await HostPortProxies.open(new Map(), secretsStore())).toBeUndefined();
  const upstream = await echoServer();
  upstreams.push(upstream);
  const proxy = await proxyFor(new Map([[upstream.port, ["KEY"]]]));
  const port = proxy.targets().get(upstream.port)!;
  await proxy.close();
  await expect(get(port, {})).rejects.toMatchObject({ code: "ECONNREFUSED" });
});

test("Basic credentials and a PHP-style JSON echo come back as the guest wrote them", async () => {
  const upstream = await echoServer((request, response) => {
    request.resume();
    response.writeHead(200, { "content-type": "application/json", "x-echo": String(request.headers.authorization) });
    response.end(JSON.stringify(request.headers).replace(/\//g, "\\/"));
  });
  upstreams.push(upstream);
  const proxy = await proxyFor(new Map([[upstream.port, ["KEY"]]]));
  // A short value: below the length at which its base64 is looked for inside a longer text.
  store.update("KEY", "short/v");
  // "user:" is 5 bytes: the value starts inside a base64 quad.
  const guest = `Basic ${Buffer.from(`user:${PLACEHOLDER}`).toString("base64")}`;
  const answer = await get(proxy.targets().get(upstream.port)!, { authorization: guest, "x-api-key": PLACEHOLDER });
  expect(upstream.seen[0]).toMatchObject({
    authorization: `Basic ${Buffer.from("user:short/v").toString("base64")}`,
    "x-api-key": "short/v",
  });
  expect(answer.body).toContain('"x-api-key":"' + PLACEHOLDER);
  expect(answer.headers["x-echo"]).toBe(guest);
  expect(JSON.parse(answer.body)).toMatchObject({ authorization: guest, "x-api-key": PLACEHOLDER });
});

/** A host service that answers `coded <authorization>` in the codings named by the query. */
async function codedServer(): Promise<Upstream> {
  return echoServer((request, response) => {
    request.resume();
    const query = new URL(request.url!, "http://x").searchParams;
    const [ce, te] = [query.get("ce"), query.get("te")];
    const list = [ce, te]
      .flatMap((value) => (value ?? "").split(","))
      .map((coding) => coding.trim().toLowerCase())
      .filter((coding) => coding !== "" && coding !== "chunked");
    let body = Buffer.from(`coded ${request.headers.authorization}`);
    for (const coding of list) {
      if (coding === "gzip" || coding === "x-gzip") body = zlib.gzipSync(body);
      else if (coding === "deflate") body = zlib.deflateSync(body);
      else if (coding === "br") body = zlib.brotliCompressSync(body);
    }
    response.writeHead(200, {
      ...(ce === null ? {} : { "content-encoding": ce }),
      ...(te ? { "transfer-encoding": te } : {}),
    });
    response.end(body);
  });
}

test.each([
  ["identity, gzip", "ce=identity,%20gzip"],
  ["a trailing comma (gzip,)", "ce=gzip,"],
  ["upper case and empty members ( GZIP ,, br)", "ce=%20GZIP%20,,%20br"],
  ["transfer coding gzip, chunked", "te=gzip,%20chunked"],
  ["content gzip under transfer gzip, chunked", "ce=gzip&te=gzip,%20chunked"],
])("an answer in %s is decoded by the proxy and scrubbed", async (_case, query) => {
  const upstream = await codedServer();
  upstreams.push(upstream);
  const proxy = await proxyFor(new Map([[upstream.port, ["KEY"]]]));
  const answer = await get(
    proxy.targets().get(upstream.port)!,
    { authorization: `Bearer ${PLACEHOLDER}` },
    `/?${query}`,
  );
  expect(answer.status).toBe(200);
  expect(answer.headers["content-encoding"]).toBeUndefined();
  expect(answer.headers["transfer-encoding"]).not.toMatch(/gzip/);
  expect(answer.body).toBe(`coded Bearer ${PLACEHOLDER}`);
});

test.each([
  ["an unknown content coding (zstd)", "ce=gzip,%20zstd"],
  ["a coding with parameters", "ce=gzip;q=1"],
  ["transfer coding chunked that is not last", "te=chunked,%20gzip"],
])("an answer in %s gets 502 with a body that says why", async (_case, query) => {
  const upstream = await codedServer();
  upstreams.push(upstream);
  const proxy = await proxyFor(new Map([[upstream.port, ["KEY"]]]));
  const answer = await get(
    proxy.targets().get(upstream.port)!,
    { authorization: `Bearer ${PLACEHOLDER}` },
    `/?${query}`,
  );
  expect(answer.status).toBe(502);
  expect(answer.body).toMatch(/^pi-sandbox: host port \d+ answered in a coding the host cannot check for secrets/);
  expect(answer.body).not.toContain(REAL);
});
