// The fetch Gondolin sends the guest's requests with when a VM has secrets (secret-fetch.ts),
// against a real HTTPS fake API on loopback: what the API receives, and what comes back.
import dns from "node:dns";
import zlib from "node:zlib";
import { egressPolicy } from "../src/egress/egress-policy.js";
import { loadGondolin } from "../src/gondolin-loader.js";
import { httpsEcho, type HttpsEcho } from "./support/https-echo.js";
import { loopbackLookup } from "./support/vm-support.js";

const API = "pisb-api.test";
const VALUE = "sk-real/value+never-in-the-guest";
const PLACEHOLDER = "PI_SANDBOX_SECRET_feedfacecafe0001";
const originalLookup = dns.lookup;

/** The members of a coding list, as a sender applies them (chunked is framing, not body). */
const codings = (list: string | null) =>
  (list ?? "")
    .split(",")
    .map((coding) => coding.trim().toLowerCase())
    .filter((coding) => coding !== "" && coding !== "chunked");

/** `text` with each coding applied in order; one the test does not know is left out (sent raw). */
function encodeWith(list: string[], text: string): Buffer {
  let body = Buffer.from(text);
  for (const coding of list) {
    if (coding === "gzip" || coding === "x-gzip") body = zlib.gzipSync(body);
    else if (coding === "deflate") body = zlib.deflateSync(body);
    else if (coding === "br") body = zlib.brotliCompressSync(body);
  }
  return body;
}
let echo: HttpsEcho;
let policy: Awaited<ReturnType<typeof makePolicy>>;

async function makePolicy() {
  return egressPolicy(await loadGondolin(), {
    allowedHosts: [API],
    allowedInternalHosts: [API],
    secrets: { KEY: { value: VALUE, placeholder: PLACEHOLDER, hosts: [API] } },
    upstream: { ca: echo.ca, httpsPort: echo.port },
  });
}

beforeAll(async () => {
  (dns as { lookup: unknown }).lookup = loopbackLookup(new Set([API]));
  echo = await httpsEcho([API], (request, response) => {
    if (request.url === "/gzip") {
      response.writeHead(200, { "content-encoding": "gzip" }).end(zlib.gzipSync(`gz ${request.headers.authorization}`));
    } else if (request.url === "/compress") {
      response.writeHead(200, { "content-encoding": "compress" }).end(`raw ${request.headers.authorization}`);
    } else if (request.url === "/php") {
      // PHP's json_encode writes a slash as \/.
      response.writeHead(200, { "content-type": "application/json" });
      response.end(JSON.stringify(request.headers).replace(/\//g, "\\/"));
    } else if (request.url.startsWith("/coded?")) {
      const query = new URL(request.url, "https://x").searchParams;
      const [ce, te] = [query.get("ce"), query.get("te")];
      response.writeHead(200, {
        ...(ce === null ? {} : { "content-encoding": ce }),
        ...(te ? { "transfer-encoding": te } : {}),
      });
      response.end(encodeWith([...codings(ce), ...codings(te)], `coded ${request.headers.authorization}`));
    } else if (request.url === "/split") {
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(`data: ${VALUE.slice(0, 9)}`);
      setTimeout(() => response.end(`${VALUE.slice(9)}\n\n`), 30);
    } else return false;
    return true;
  });
  policy = await makePolicy();
});

afterAll(async () => {
  await policy?.close();
  await echo?.close();
  (dns as { lookup: unknown }).lookup = originalLookup;
});

const send = (url: string, headers: Record<string, string>, body?: string) =>
  policy.fetch!(url, { method: body ? "POST" : "GET", headers, ...(body ? { body } : {}) });

test("the API gets the value in authorization; the echo the guest gets back holds only the placeholder", async () => {
  const response = await send(`https://${API}/echo`, { authorization: `Bearer ${PLACEHOLDER}` });
  expect(echo.received.at(-1)!.headers.authorization).toBe(`Bearer ${VALUE}`);
  const text = await response.text();
  expect(response.status).toBe(200);
  expect(text).toContain(`Bearer ${PLACEHOLDER}`);
  expect(text).not.toContain(VALUE);
  expect(response.headers.get("x-echo-authorization")).toBe(`Bearer ${PLACEHOLDER}`);
  expect(response.headers.get("content-length")).toBeNull();
});

test("a placeholder in user-agent, in the URL or on another port is refused with 403 before it leaves the host", async () => {
  const before = echo.received.length;
  for (const [url, headers] of [
    [`https://${API}/ua`, { "user-agent": `tool ${PLACEHOLDER}` }],
    [`https://${API}/q?k=${PLACEHOLDER}`, {}],
    [`http://${API}:8080/`, { authorization: `Bearer ${PLACEHOLDER}` }],
  ] as [string, Record<string, string>][]) {
    const response = await send(url, headers);
    expect({ url, status: response.status }).toEqual({ url, status: 403 });
    expect(await response.text()).toMatch(/^pi-sandbox: request refused: secret KEY may not be sent/);
  }
  expect(echo.received.length).toBe(before);
});

test("a placeholder in a body is passed as written: the value never goes into a body", async () => {
  const response = await send(`https://${API}/body`, {}, `{"key":"${PLACEHOLDER}"}`);
  expect(echo.received.at(-1)!.body).toBe(`{"key":"${PLACEHOLDER}"}`);
  expect(await response.text()).not.toContain(VALUE);
});

test("a gzip answer is decoded and scrubbed; an encoding the host cannot decode gets 502", async () => {
  const gz = await send(`https://${API}/gzip`, { authorization: `Bearer ${PLACEHOLDER}`, "accept-encoding": "zstd" });
  expect(echo.received.at(-1)!.headers["accept-encoding"]).toBe("gzip, deflate, br");
  expect(await gz.text()).toBe(`gz Bearer ${PLACEHOLDER}`);
  const raw = await send(`https://${API}/compress`, { authorization: `Bearer ${PLACEHOLDER}` });
  expect(raw.status).toBe(502);
  expect(await raw.text()).not.toContain(VALUE);
});

test("a value streamed in two pieces a moment apart reaches the guest as the placeholder", async () => {
  const response = await send(`https://${API}/split`, {});
  expect(await response.text()).toBe(`data: ${PLACEHOLDER}\n\n`);
});

test("Basic credentials the API echoes come back as the guest wrote them, in the body and in headers", async () => {
  // "user:" is 5 bytes: the value starts inside a base64 quad.
  const guest = `Basic ${Buffer.from(`user:${PLACEHOLDER}`).toString("base64")}`;
  const response = await send(`https://${API}/echo`, { authorization: guest });
  expect(echo.received.at(-1)!.headers.authorization).toBe(`Basic ${Buffer.from(`user:${VALUE}`).toString("base64")}`);
  const text = await response.text();
  expect(JSON.parse(text).headers.authorization).toBe(guest);
  expect(response.headers.get("x-echo-authorization")).toBe(guest);
  // Nor any run of the value's own base64 at another alignment.
  const real = Buffer.from(`user:${VALUE}`).toString("base64");
  expect(text).not.toContain(real.slice(4, 40));
});

test("an API that writes a slash in JSON as \\/ gives back the placeholder, not the value", async () => {
  const response = await send(`https://${API}/php`, { authorization: `Bearer ${PLACEHOLDER}` });
  expect(JSON.parse(await response.text()).authorization).toBe(`Bearer ${PLACEHOLDER}`);
});

describe("answers in content and transfer codings", () => {
  const DECODED: [string, string][] = [
    ["identity, gzip", "ce=identity,%20gzip"],
    ["a trailing comma (gzip,)", "ce=gzip,"],
    ["upper case and empty members ( GZIP ,, br)", "ce=%20GZIP%20,,%20br"],
    ["x-gzip then deflate", "ce=x-gzip,deflate"],
    ["transfer coding gzip, chunked", "te=gzip,%20chunked"],
    ["content gzip under transfer gzip, chunked", "ce=gzip&te=gzip,%20chunked"],
  ];
  test.each(DECODED)("%s is decoded by the host and scrubbed", async (_case, query) => {
    const response = await send(`https://${API}/coded?${query}`, { authorization: `Bearer ${PLACEHOLDER}` });
    expect(response.status).toBe(200);
    expect(response.headers.get("content-encoding")).toBeNull();
    expect(await response.text()).toBe(`coded Bearer ${PLACEHOLDER}`);
  });

  const REFUSED: [string, string][] = [
    ["an unknown content coding (zstd)", "ce=gzip,%20zstd"],
    ["a coding with parameters", "ce=gzip;q=1"],
    ["transfer coding chunked that is not last", "te=chunked,%20gzip"],
  ];
  test.each(REFUSED)("%s gets 502 with a body that says why", async (_case, query) => {
    const response = await send(`https://${API}/coded?${query}`, { authorization: `Bearer ${PLACEHOLDER}` });
    expect(response.status).toBe(502);
    const text = await response.text();
    expect(text).toMatch(/^pi-sandbox: .*cannot check for secrets/);
    expect(text).not.toContain(VALUE);
  });

  test("the guest's TE and accept-encoding never reach the API: it is asked only for codings the host decodes", async () => {
    await send(`https://${API}/echo`, { te: "gzip", "accept-encoding": "zstd, identity" });
    expect(echo.received.at(-1)!.headers).toMatchObject({ "accept-encoding": "gzip, deflate, br" });
    expect(echo.received.at(-1)!.headers.te).toBeUndefined();
  });
});
