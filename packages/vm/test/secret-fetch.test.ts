// The fetch Gondolin sends the guest's requests with when a VM has secrets (secret-fetch.ts),
// against a real HTTPS fake API on loopback: what the API receives, and what comes back.
import dns from "node:dns";
import zlib from "node:zlib";
import { egressPolicy } from "../src/egress-policy.js";
import { loadGondolin } from "../src/gondolin-loader.js";
import { httpsEcho, type HttpsEcho } from "./support/https-echo.js";
import { loopbackLookup } from "./vm-support.js";

const API = "pisb-api.test";
const VALUE = "sk-real/value+never-in-the-guest";
const PLACEHOLDER = "PI_SANDBOX_SECRET_feedfacecafe0001";
const originalLookup = dns.lookup;
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
