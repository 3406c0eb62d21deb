// On-demand benchmark (npm run bench): one VM, measured side by side in one run.
//  1. exec round trip of `true` through the agent channel vs bare GuestVm execs of it: the string
//     form (`/bin/sh -lc true`, the baseline) and the agent's own shell (`bash -lc true`,
//     the same shell semantics); plus, for information, the agent with a cold shell start;
//  2. the service restart delay (exit -> next start), which should read 1.0 ± 0.2 s.
// Rounds alternate which side goes first and pause between measurements, so background work of
// one side (the agent starting its next warm shell) never lands inside the other's measurement.
// Needs the guest test image (PI_SANDBOX_TEST_IMAGE, else built/located like the real-VM suites).
import { appendFileSync } from "node:fs";
import { createRequire } from "node:module";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DiskStore, runInGuest, startVm } from "@pi-sandbox/vm";
import { SupervisorClient } from "../dist/index.js";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 20);
const RESTARTS = Number(process.env.BENCH_RESTARTS ?? 5);
const SETTLE_MS = Number(process.env.BENCH_SETTLE_MS ?? 500);

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
const fmt = (ms: number) => `${ms.toFixed(1)} ms`;
const settle = () => new Promise((resolve) => setTimeout(resolve, SETTLE_MS));

async function timed(fn: () => Promise<unknown>): Promise<number> {
  await settle();
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

async function main(): Promise<void> {
  const setupImage = createRequire(import.meta.url)("../../../jest.test-image.cjs") as () => Promise<void>;
  await setupImage();
  const image = process.env.PI_SANDBOX_TEST_IMAGE!;
  const dir = await mkdtemp(join(tmpdir(), "pisb-b-"));
  const stateRoot = join(dir, "st");
  await new DiskStore({ stateRoot }).createDisk(join(dir, "disk"), { image, diskGiB: 4 });
  const vm = await startVm({
    name: "sup-bench",
    diskDir: join(dir, "disk"),
    stateRoot,
    spec: { resources: { cpus: 2, memoryGiB: 1 }, network: { allowedHosts: [] } },
  });
  let client: SupervisorClient | undefined;
  try {
    console.log(`boot: ${fmt(vm.bootMs)} (${vm.accelerator.accel})`);
    client = await SupervisorClient.start({ vm, workspace: "/workspace" });
    const { shell, warmShell } = client.hello;
    console.log(
      `agent: python ${client.hello.python}, shell ${shell}${warmShell ? " (warm)" : ""}, cleanup ${client.hello.cleanup}`,
    );

    const sides: [string, () => Promise<unknown>][] = [
      ["agent", () => client!.exec("true")],
      ["bare sh", () => runInGuest(vm, "true")],
      ["bare shell", () => runInGuest(vm, [shell, "-lc", "true"])],
      // An exec with its own env cannot use the warm shell: what every exec cost before it.
      ["agent cold", () => client!.exec("true", { env: { PI_SANDBOX_BENCH: "cold" } })],
    ];
    const times = new Map<string, number[]>(sides.map(([name]) => [name, []]));
    for (const [, run] of sides) await run(); // warm-up, not measured
    for (let i = 0; i < ROUNDS; i++) {
      const order = i % 2 === 0 ? sides : [...sides].reverse();
      for (const [name, run] of order) times.get(name)!.push(await timed(run));
    }
    const med = (name: string) => median(times.get(name)!);
    console.log(`exec \`true\` x${ROUNDS} (medians):`);
    console.log(`  agent:                         ${fmt(med("agent"))}`);
    console.log(
      `  bare vm.exec("true") (sh -lc): ${fmt(med("bare sh"))}  ratio agent/bare ${(med("agent") / med("bare sh")).toFixed(2)}`,
    );
    console.log(
      `  bare vm.exec(${shell} -lc true): ${fmt(med("bare shell"))}  ratio agent/bare ${(med("agent") / med("bare shell")).toFixed(2)}`,
    );
    console.log(`  agent, cold shell start:       ${fmt(med("agent cold"))}`);
    summaryRow({
      name: "exec `true`: agent channel vs bare vm.exec (sh -lc)",
      ours: med("agent"),
      baseline: med("bare sh"),
      unit: "ms",
      target: "<= 1.0",
      accelerator: vm.accelerator.accel,
    });
    summaryRow({
      name: `exec \`true\`: agent channel vs bare vm.exec of the same ${shell} -lc`,
      ours: med("agent"),
      baseline: med("bare shell"),
      unit: "ms",
      target: "<= 1.0",
      accelerator: vm.accelerator.accel,
    });

    await client.writeFile(
      "/workspace/.sandbox.yaml",
      "version: 1\nservices:\n  blip:\n    command: exec sleep 0.5\n    health: process\n",
      {
        createParents: true,
      },
    );
    const gaps: number[] = [];
    let lastExit: number | undefined;
    const off = client.onEvent((event) => {
      if (event.data.service !== "blip") return;
      if (event.data.type === "exit") lastExit = performance.now();
      if (event.data.type === "start" && lastExit !== undefined) {
        gaps.push(performance.now() - lastExit);
        lastExit = undefined;
      }
    });
    await client.ensureServices();
    while (gaps.length < RESTARTS) await new Promise((r) => setTimeout(r, 100));
    off();
    await client.stopServices();
    const avg = mean(gaps) / 1000;
    const ok = gaps.every((g) => g >= 800 && g <= 1200);
    console.log(
      `restart delay x${gaps.length}: mean ${avg.toFixed(3)} s, min ${(Math.min(...gaps) / 1000).toFixed(3)} s, max ${(Math.max(...gaps) / 1000).toFixed(3)} s`,
    );
    console.log(`  within 1.0 ± 0.2 s: ${ok ? "yes" : "NO"}`);
    summaryRow({ name: "service restart delay (mean)", ours: avg, unit: "s", target: "1.0 ± 0.2" });
  } finally {
    await client?.close();
    await vm.close();
    await rm(dir, { recursive: true, force: true });
  }
}

/** Appends a row to `npm run bench`'s summary table (see scripts/bench.mjs). */
function summaryRow(row: Record<string, unknown>): void {
  const out = process.env.PI_SANDBOX_BENCH_OUT;
  if (!out) return;
  const ratio = typeof row.ours === "number" && typeof row.baseline === "number" ? row.ours / row.baseline : undefined;
  appendFileSync(out, `${JSON.stringify({ package: "supervisor", ratio, ...row })}\n`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
