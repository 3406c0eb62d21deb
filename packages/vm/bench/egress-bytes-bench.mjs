#!/usr/bin/env node
// On-demand benchmark of egress byte counting (needs a build: `npx nx run @pi-sandbox/vm:build`):
// what counting-fetch.ts adds to a request hop, against a loopback HTTP server, no VM:
//   1. a small GET (a 300-byte answer): the guarded fetch a VM without secrets gets, counting on vs
//      off, alternating, median of each and of each pair's difference;
//   2. a 64 MiB download, counting on vs off.
// Part of `npm run bench` (after secret-fetch-bench.mjs), or `node packages/vm/bench/egress-bytes-bench.mjs`.
import http from "node:http";
import { median, summaryRow } from "./kit.mjs";

const { countingFetch } = await import("../dist/egress/counting-fetch.js");
const { guardedFetch } = await import("../dist/egress/upstream-dispatchers.js");

const MiB = 1024 ** 2;
const PAIRS = Number(process.env.BENCH_PAIRS ?? 2000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);

const small = Buffer.alloc(300, 0x61);
const big = Buffer.alloc(64 * MiB, 0x62);
const server = http.createServer((request, response) => {
  request.resume();
  response.end(request.url === "/big" ? big : small);
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const base = `http://127.0.0.1:${server.address().port}`;

const upstream = guardedFetch(async () => true);
let reports = 0;
const variants = { off: upstream.fetch, on: countingFetch(upstream.fetch, () => reports++) };
const drain = async (response) => {
  let bytes = 0;
  for await (const chunk of response.body) bytes += chunk.length;
  return bytes;
};
const time = async (fetch, path) => {
  const started = performance.now();
  const bytes = await drain(await fetch(`${base}${path}`, { method: "GET" }));
  return { ms: performance.now() - started, bytes };
};

const rows = [];
for (const [path, pairs, expected] of [
  ["/small", PAIRS, small.length],
  ["/big", ROUNDS, big.length],
]) {
  // Warm the connection pool and the JIT.
  for (let i = 0; i < Math.min(pairs, 200); i++) await time(i % 2 ? variants.on : variants.off, path);
  const times = { on: [], off: [] };
  const diffs = [];
  for (let i = 0; i < pairs; i++) {
    const order = i % 2 ? ["on", "off"] : ["off", "on"];
    const pair = {};
    for (const which of order) {
      const { ms, bytes } = await time(variants[which], path);
      if (bytes !== expected) throw new Error(`short body: ${bytes} of ${expected}`);
      pair[which] = ms;
      times[which].push(ms);
    }
    diffs.push(pair.on - pair.off);
  }
  const [on, off] = [median(times.on), median(times.off)];
  const label = path === "/small" ? "small GET (300 B)" : "64 MiB GET";
  rows.push([
    `${label}, ${pairs} pairs: counting on ${on.toFixed(3)} ms vs off ${off.toFixed(3)} ms`,
    `ratio ${(on / off).toFixed(3)}; a pair's difference, median ${(median(diffs) * 1000).toFixed(0)} µs`,
  ]);
  summaryRow({
    name: `egress byte counting, ${label}: on vs off`,
    ours: on,
    baseline: off,
    ratio: on / off,
    unit: "ms",
  });
}
await upstream.close();
server.closeAllConnections();
server.close();

console.log(`(${reports} exchanges reported)`);
console.log("| measurement | result |\n|---|---|");
for (const [name, value] of rows) console.log(`| ${name} | ${value} |`);
