// On-demand benchmark (npm run bench): one VM, measured side by side in one run.
//  1. exec round trip of `true` through the agent channel vs a bare GuestVm exec of the same command;
//  2. the service restart delay (exit -> next start), which should read 1.0 ± 0.2 s.
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

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
const fmt = (ms: number) => `${ms.toFixed(1)} ms`;

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
    console.log(`agent: python ${client.hello.python}, shell ${client.hello.shell}, cleanup ${client.hello.cleanup}`);

    const agent: number[] = [];
    const bare: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      let t0 = performance.now();
      await client.exec("true");
      agent.push(performance.now() - t0);
      t0 = performance.now();
      await runInGuest(vm, "true");
      bare.push(performance.now() - t0);
    }
    console.log(
      `exec \`true\` x${ROUNDS}: agent median ${fmt(median(agent))}, bare vm.exec median ${fmt(median(bare))}`,
    );
    console.log(`  ratio agent/bare: ${(median(agent) / median(bare)).toFixed(2)}`);
    summaryRow({
      name: "exec `true`: agent channel vs bare vm.exec",
      ours: median(agent),
      baseline: median(bare),
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
