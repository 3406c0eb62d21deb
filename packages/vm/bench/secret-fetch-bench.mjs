#!/usr/bin/env node
// On-demand benchmark of the secret scrubber (needs a build: `npx nx run @pi-sandbox/vm:build`):
//   1. StreamScrubber alone: MiB/s over 64 MiB of text in 16 KiB chunks, for 1 and 3 secrets
//   2. secret-fetch: a 64 MiB download from a loopback HTTPS server through createSecretFetch
//      (substitution, decoding, scrubbing) vs plain undici fetch of the same URL; identity and gzip
// Runs in ~20 s, no VM; part of `npm run bench` (after vm-bench.mjs), or on its own:
// `node packages/vm/bench/secret-fetch-bench.mjs` from the workspace root.
import crypto from "node:crypto";
import dns from "node:dns";
import https from "node:https";
import zlib from "node:zlib";
import { Agent, fetch } from "undici";
import { median, summaryRow } from "./kit.mjs";

const { StreamScrubber } = await import("../dist/egress/secret-scrubber.js");
const { SecretStore } = await import("../dist/egress/secret-rules.js");
const { createSecretFetch } = await import("../dist/egress/secret-fetch.js");
const { selfSignedCert } = await import("../dist/testing/test-cert.js");

const MiB = 1024 ** 2;
const HOST = "bench.pisb.test";
const CHUNK = 16 * 1024;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

/** Printable text without any secret: JSON-ish lines of random base64 and words. */
function corpus(bytes) {
  const parts = [];
  let size = 0;
  while (size < bytes) {
    const line = `{"id":"${crypto.randomBytes(24).toString("base64")}","text":"lorem ipsum/dolor+sit=amet ${size}"},\n`;
    parts.push(line);
    size += line.length;
  }
  return Buffer.from(parts.join("")).subarray(0, bytes);
}

const secret = (i) => ({
  name: `KEY${i}`,
  value: `sk-ant-api03-${crypto.randomBytes(70).toString("base64url")}/${i}`,
  placeholder: `PI_SANDBOX_SECRET_${crypto.randomBytes(8).toString("hex")}`,
  httpHosts: [HOST],
});
const storeOf = (count) => {
  const store = new SecretStore();
  for (let i = 0; i < count; i++) store.add(secret(i));
  return store;
};

const body = corpus(64 * MiB);
const rows = [];

for (const count of [1, 3]) {
  const patterns = storeOf(count).patterns();
  const times = [];
  for (let round = 0; round < ROUNDS; round++) {
    const scrubber = new StreamScrubber(patterns);
    const started = performance.now();
    for (let i = 0; i < body.length; i += CHUNK) scrubber.push(body.subarray(i, i + CHUNK));
    scrubber.end();
    times.push(performance.now() - started);
  }
  const ms = median(times);
  rows.push([
    `StreamScrubber, ${count} secret(s), ${patterns.length} patterns`,
    `${(64 / (ms / 1000)).toFixed(0)} MiB/s`,
  ]);
}

const { cert, key } = selfSignedCert([HOST]);
const gzipped = zlib.gzipSync(body, { level: 1 });
const server = https.createServer({ cert, key }, (request, response) => {
  request.resume();
  if (request.url === "/gzip") response.writeHead(200, { "content-encoding": "gzip" }).end(gzipped);
  else response.writeHead(200, { "content-type": "application/json" }).end(body);
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const port = server.address().port;
const originalLookup = dns.lookup;
dns.lookup = (hostname, options, callback) => {
  const done = typeof options === "function" ? options : callback;
  const all = typeof options === "object" && options?.all;
  if (all) process.nextTick(done, null, [{ address: "127.0.0.1", family: 4 }]);
  else process.nextTick(done, null, "127.0.0.1", 4);
};

const store = storeOf(1);
const secretFetch = createSecretFetch({
  store,
  isIpAllowed: async () => true,
  upstream: { ca: cert, httpsPort: port },
});
const plain = new Agent({ connect: { ca: cert } });
const drain = async (response) => {
  let bytes = 0;
  for await (const chunk of response.body) bytes += chunk.length;
  return bytes;
};
for (const path of ["/identity", "/gzip"]) {
  const ours = [];
  const bare = [];
  for (let round = 0; round < ROUNDS; round++) {
    let started = performance.now();
    const a = await drain(
      await secretFetch.fetch(`https://${HOST}${path}`, {
        headers: { authorization: `Bearer ${store.all()[0].placeholder}` },
      }),
    );
    ours.push(performance.now() - started);
    started = performance.now();
    const b = await drain(await fetch(`https://${HOST}:${port}${path}`, { dispatcher: plain }));
    bare.push(performance.now() - started);
    if (a !== body.length || b !== body.length) throw new Error(`short body: ${a} / ${b} of ${body.length}`);
  }
  const [o, b] = [median(ours), median(bare)];
  rows.push([
    `secret-fetch 64 MiB ${path.slice(1)}: ours ${o.toFixed(0)} ms vs plain undici ${b.toFixed(0)} ms`,
    `ratio ${(o / b).toFixed(2)}`,
  ]);
  // A row for `npm run bench`'s summary table.
  summaryRow({
    name: `secret fetch, 64 MiB ${path.slice(1)} (substituted, decoded, scrubbed) vs plain undici`,
    ours: o,
    baseline: b,
    ratio: o / b,
    unit: "ms",
  });
}
await secretFetch.close();
await plain.close();
server.closeAllConnections();
server.close();
dns.lookup = originalLookup;

console.log("| measurement | result |\n|---|---|");
for (const [name, value] of rows) console.log(`| ${name} | ${value} |`);
