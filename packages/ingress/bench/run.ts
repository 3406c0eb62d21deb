// On-demand benchmark of the preview gateway (`npm run bench`, `npm run bench -- --vm`).
// Prints requests/s, p50/p99 latency and throughput side by side, measured in one run:
//   host:  straight to a host server | raw byte tunnel | a bare undici proxy (reference) |
//          previews (keep-alive on/off, plain Duplex)
//   --vm (or --vm-only): Gondolin's own ingress gateway | raw byte tunnel over connectTcp (the bare
//          virtio channel) | previews over connectTcp (keep-alive on/off)
// Not a timed assertion: read the ratios.
import { createServer as createNetServer, type Server as NetServer } from "node:net";
import { createRequire } from "node:module";
import { appendFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { cpus, loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { createServer } from "node:http";
import { pipeline } from "node:stream/promises";
import { Pool } from "undici";
import { Worker } from "node:worker_threads";
import { PreviewGateway, type GuestConnector } from "../src/index.js";
import { loopbackConnector } from "../src/testing.js";
import type { LoadOptions, LoadResult } from "./load.js";

const hooks = new URL("../../../scripts/register-ts.mjs", import.meta.url).href;

function onThread<T>(file: string, data?: unknown): { worker: Worker; first: Promise<T> } {
  const worker = new Worker(new URL(file, import.meta.url), { workerData: data, execArgv: ["--import", hooks] });
  const first = new Promise<T>((resolve, reject) => {
    worker.once("message", resolve);
    worker.once("error", reject);
  });
  return { worker, first };
}

async function runLoad(options: LoadOptions): Promise<LoadResult> {
  const { worker, first } = onThread<LoadResult>("./load-worker.ts", options);
  try {
    return await first;
  } finally {
    await worker.terminate();
  }
}

const { values: args } = parseArgs({
  options: {
    vm: { type: "boolean", default: false },
    seconds: { type: "string", default: "3" },
    rounds: { type: "string", default: "3" },
    "vm-only": { type: "boolean", default: false },
  },
});
const seconds = Number(args.seconds);
const rounds = Number(args.rounds);

interface Row {
  target: string;
  scenario: string;
  result: LoadResult;
}

const rows: Row[] = [];

interface Scenario {
  name: string;
  path: string;
  concurrency: number;
}

function scenarios(smallPath: string, blobPath: string): Scenario[] {
  return [
    { name: "small GET, 1 client", path: smallPath, concurrency: 1 },
    { name: "small GET, 16 clients", path: smallPath, concurrency: 16 },
    { name: "256 KiB GET, 4 clients", path: blobPath, concurrency: 4 },
  ];
}

/**
 * Measures every target on every scenario. Targets take turns within each round, and each row
 * keeps the median round, so a noisy neighbour (2 shared cores) skews all targets alike.
 */
async function measure(targets: { name: string; origin: string }[], list: Scenario[]): Promise<void> {
  for (const scenario of list) {
    const results = new Map<string, LoadResult[]>();
    for (let round = 0; round < rounds; round++) {
      for (const target of round % 2 === 0 ? targets : [...targets].reverse()) {
        const result = await runLoad({
          origin: target.origin,
          path: scenario.path,
          concurrency: scenario.concurrency,
          seconds,
        });
        results.set(target.name, [...(results.get(target.name) ?? []), result]);
        process.stderr.write(
          `  ${target.name} / ${scenario.name} / round ${round + 1}: ${result.perSecond.toFixed(0)} req/s\n`,
        );
      }
    }
    for (const target of targets) {
      const sorted = results.get(target.name)!.sort((a, b) => a.perSecond - b.perSecond);
      rows.push({ target: target.name, scenario: scenario.name, result: sorted[Math.floor(sorted.length / 2)]! });
    }
  }
}

/** A byte pipe per client connection through `connector`: what a bare port forwarder costs. */
async function rawTunnel(
  connector: GuestConnector,
  guestPort: number,
): Promise<{ origin: string; close(): Promise<void> }> {
  const sockets = new Set<import("node:net").Socket>();
  const server: NetServer = createNetServer((client) => {
    sockets.add(client);
    client.once("close", () => sockets.delete(client));
    client.pause();
    connector(guestPort, {}).then(
      (guest) => {
        client.pipe(guest).pipe(client);
        const cut = () => {
          client.destroy();
          guest.destroy();
        };
        guest.on("error", cut).on("close", cut);
        client.on("error", cut).on("close", cut);
        client.resume();
      },
      () => client.destroy(),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  return {
    origin: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Reference point: the least a Node proxy hop can do (undici pool, no guards, no header work). */
async function bareUndiciProxy(guestPort: number): Promise<{ origin: string; close(): Promise<void> }> {
  const pool = new Pool(`http://127.0.0.1:${guestPort}`);
  const server = createServer((req, res) => {
    pool.request({ method: req.method as "GET", path: req.url ?? "/", headers: { host: req.headers.host ?? "" } }).then(
      (answer) => {
        res.writeHead(answer.statusCode, answer.headers as Record<string, string>);
        pipeline(answer.body, res).catch(() => res.destroy());
      },
      () => res.destroy(),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    origin: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await pool.destroy();
    },
  };
}

async function previewOrigin(
  gateways: PreviewGateway[],
  connector: GuestConnector,
  guestPort: number,
  keepAlive: boolean,
): Promise<string> {
  const gateway = new PreviewGateway({ connector, upstreamKeepAlive: keepAlive });
  gateways.push(gateway);
  return (await gateway.open({ key: "bench", guestPort, links: [] })).origin;
}

async function hostBench(): Promise<void> {
  const { worker: serverThread, first } = onThread<number>("./server-worker.ts");
  const port = await first;
  const list = scenarios("/hello", "/blob");
  const gateways: PreviewGateway[] = [];
  const tunnel = await rawTunnel(loopbackConnector(), port);
  const bare = await bareUndiciProxy(port);
  try {
    process.stderr.write("host-local server:\n");
    await measure(
      [
        { name: "host: direct", origin: `http://127.0.0.1:${port}` },
        { name: "host: raw tunnel", origin: tunnel.origin },
        { name: "host: bare undici proxy", origin: bare.origin },
        { name: "host: preview", origin: await previewOrigin(gateways, loopbackConnector(), port, true) },
        {
          name: "host: preview, no keep-alive",
          origin: await previewOrigin(gateways, loopbackConnector(), port, false),
        },
        {
          name: "host: preview, plain Duplex",
          origin: await previewOrigin(gateways, loopbackConnector({ plainDuplex: true }), port, true),
        },
      ],
      list,
    );
  } finally {
    await Promise.all(gateways.map((g) => g.closeAll()));
    await tunnel.close();
    await bare.close();
    await serverThread.terminate();
  }
}

async function vmBench(): Promise<void> {
  if (!process.env.PI_SANDBOX_TEST_IMAGE) {
    // The workspace's jest globalSetup builds or reuses the test image and sets the variable.
    const setup = fileURLToPath(new URL("../../../jest.test-image.cjs", import.meta.url));
    await createRequire(import.meta.url)(setup)();
  }
  const { bootTestVm, openGondolinIngress, runInGuest } = await import("@pi-sandbox/vm/testing");
  const { guestVmConnector } = await import("../src/index.js");
  process.stderr.write("booting the test image...\n");
  const testVm = await bootTestVm("ingress-bench");
  const gateways: PreviewGateway[] = [];
  let tunnel: { origin: string; close(): Promise<void> } | undefined;
  let gondolinIngress: { origin: string; close(): Promise<void> } | undefined;
  try {
    const guestPort = 8124;
    await testVm.vm.writeFile(
      "/tmp/guest_server.py",
      await readFile(new URL("../test/support/guest_server.py", import.meta.url)),
    );
    const server = testVm.vm.exec(["/usr/bin/python3", "/tmp/guest_server.py", String(guestPort)]);
    server.result.catch(() => undefined);
    server.stderr.resume();
    await new Promise<void>((resolve) => {
      let text = "";
      server.stdout.setEncoding("utf8").on("data", (chunk: string) => {
        text += chunk;
        if (text.includes("listening")) resolve();
      });
    });
    const connector = guestVmConnector(testVm.vm);
    // The first connectTcp of a boot turns on immediate ACKs on the guest's loopback route, in the
    // background (see vm's loopback-quickack.ts). Let that finish so every target meets the same guest.
    (await connector(guestPort, {})).destroy();
    for (let tries = 0; tries < 300; tries++) {
      if ((await runInGuest(testVm.vm, "ip route show table local")).stdout.includes("quickack 1")) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const list = scenarios("/hello", "/bytes?n=262144");
    tunnel = await rawTunnel(connector, guestPort);
    // Gondolin's own gateway comes first: every other VM target is reported relative to it.
    gondolinIngress = await openGondolinIngress(testVm.vm, guestPort);
    process.stderr.write("guest python server in the VM:\n");
    await measure(
      [
        { name: "vm: Gondolin ingress (bare)", origin: gondolinIngress.origin },
        { name: "vm: raw tunnel (connectTcp)", origin: tunnel.origin },
        { name: "vm: preview", origin: await previewOrigin(gateways, connector, guestPort, true) },
        { name: "vm: preview, no keep-alive", origin: await previewOrigin(gateways, connector, guestPort, false) },
      ],
      list,
    );
  } finally {
    await Promise.all(gateways.map((g) => g.closeAll()));
    await tunnel?.close();
    await gondolinIngress?.close();
    await testVm.close();
  }
}

function report(): void {
  const header = ["target", "scenario", "req/s", "p50 ms", "p99 ms", "MiB/s", "errors", "req/s vs first"];
  const baseline = new Map<string, number>();
  const lines = rows.map(({ target, scenario, result }) => {
    const group = `${target.split(":")[0]}|${scenario}`;
    if (!baseline.has(group)) baseline.set(group, result.perSecond);
    return [
      target,
      scenario,
      result.perSecond.toFixed(0),
      result.p50Ms.toFixed(2),
      result.p99Ms.toFixed(2),
      (result.bytesPerSecond / 1024 / 1024).toFixed(1),
      String(result.errors),
      `${(result.perSecond / baseline.get(group)!).toFixed(2)}x`,
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const fmt = (cells: string[]) =>
    cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ");
  console.log(fmt(header));
  console.log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const line of lines) console.log(fmt(line));
  summaryRows(baseline);
  console.log(
    `\nMedian of ${rounds} interleaved rounds of ${seconds} s (after 0.5 s warm-up); closed-loop load from undici keep-alive clients on their own thread.`,
  );
  console.log(
    `Host load average at the end: ${loadavg()
      .map((n) => n.toFixed(1))
      .join(" ")} on ${cpus().length} CPUs.`,
  );
}

/** The target each group is measured against (the first one measured in that group). */
function firstTarget(target: string, scenario: string): string {
  const group = target.split(":")[0];
  return rows.find((r) => r.target.split(":")[0] === group && r.scenario === scenario)?.target ?? "first";
}

/** Rows for `npm run bench`'s summary table: each target's req/s against the first of its group. */
function summaryRows(baseline: Map<string, number>): void {
  const out = process.env.PI_SANDBOX_BENCH_OUT;
  if (!out) return;
  for (const { target, scenario, result } of rows) {
    const first = baseline.get(`${target.split(":")[0]}|${scenario}`)!;
    if (first === result.perSecond) continue;
    const row = {
      package: "ingress",
      name: `${target} ${scenario}: req/s vs ${firstTarget(target, scenario)} (p50 ${result.p50Ms.toFixed(2)} ms)`,
      ours: result.perSecond,
      baseline: first,
      ratio: result.perSecond / first,
      unit: "req/s",
      // The targets compare previews with Gondolin's bare gateway (the first VM target).
      target: target.startsWith("vm: preview") && !target.includes("no keep-alive") ? ">= 0.9" : undefined,
    };
    appendFileSync(out, `${JSON.stringify(row)}\n`);
  }
}

async function main(): Promise<void> {
  if (!args["vm-only"]) await hostBench();
  if (args.vm || args["vm-only"]) await vmBench();
  report();
}

await main();
