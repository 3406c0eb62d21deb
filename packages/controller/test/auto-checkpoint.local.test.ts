// Automatic checkpoints without QEMU: the daemon's InstanceController in-process over the local
// runtime (whose checkpoints only count), its clock injected and its looks made by the test, with
// the disk's writes played through the runtime's hook.
import { join } from "node:path";
import { VmError } from "@pi-sandbox/vm";
import { formatView } from "../src/actions/kit/text.js";
import type { StateLayout } from "../src/client/index.js";
import { inspectEntry } from "../src/state/inspect.js";
import { readStatus } from "../src/state/records.js";
import type { InstanceController, LocalRuntime } from "../src/testing.js";
import { localSandbox, type LocalDaemons, type LocalSandbox } from "./support/local-daemon.js";

const YAML = "version: 1\nprofile: tiny\ndiskGiB: 4\ncheckpoint:\n  every: 30s\n";

let now = Date.now();
/** When the guest last wrote its disk, as the runtime reports it. */
let diskWrittenAt = now;
let sandbox: LocalSandbox;
let layout: StateLayout;
let runtime: LocalRuntime;
let daemons: LocalDaemons;
let controller: InstanceController;

beforeAll(async () => {
  sandbox = await localSandbox("pisb-ckpt-", YAML, { now: () => now });
  ({ layout, runtime, daemons } = sandbox);
  runtime.hooks.diskWrittenAtMs = () => diskWrittenAt;
  await daemons.call({ action: "create", name: "ck", config: join(sandbox.dir, "sandbox.yaml") });
  controller = await daemons.daemon("ck");
});

afterAll(() => sandbox.close());

/** Waits (for real) until `condition` holds, or fails saying `what`. */
async function until(condition: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (const deadline = Date.now() + 10_000; Date.now() < deadline;) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`timed out waiting until ${what}`);
}

/** `seconds` of the daemon's looks, one a (fake) second, the guest writing its disk with `writes`. */
async function looks(seconds: number, writes: boolean): Promise<void> {
  for (let i = 0; i < seconds; i++) {
    now += 1000;
    if (writes) diskWrittenAt = now;
    controller.checkIdle();
    await new Promise((resolve) => setImmediate(resolve));
  }
}

test("a running instance is checkpointed after 30 s of writing, never while idle, and inspect shows the last one", async () => {
  await looks(120, false);
  expect(runtime.checkpoints).toEqual([]);

  await looks(31, true);
  await until(() => runtime.checkpoints.length === 1, "the first checkpoint");
  await until(async () => (await readStatus(layout, "instances", "ck"))?.lastCheckpoint !== undefined, "its record");
  const view = await inspectEntry(layout, "instances", "ck");
  expect(view.checkpoint).toEqual({
    everyMs: 30_000,
    last: { at: expect.any(String), generation: 1, stallMs: 0 },
  });
  expect(formatView(view)).toMatch(
    /^checkpoint: {2}every 30s of use; last at \S+ \(checkpoint 1, guest stalled 0 ms\)$/m,
  );

  await looks(120, false);
  expect(runtime.checkpoints).toHaveLength(1);
});

test("a failed checkpoint is recorded for inspect once, and the instance runs on", async () => {
  runtime.hooks.onCheckpoint = () => {
    throw new VmError("VM_HOST_DISK_FULL", "the host file system / is full", { hint: "free space on /" });
  };
  try {
    await looks(62, true);
    await until(async () => (await inspectEntry(layout, "instances", "ck")).errors.length > 0, "the failure's record");
    await looks(62, true);
    const view = await inspectEntry(layout, "instances", "ck");
    expect(view.errors).toEqual([
      expect.objectContaining({
        code: "VM_HOST_DISK_FULL",
        message: "an automatic checkpoint failed: the host file system / is full",
        hint: "free space on /",
      }),
    ]);
    expect(view.state).toBe("running");
  } finally {
    delete runtime.hooks.onCheckpoint;
  }
  await looks(31, true);
  await until(() => runtime.checkpoints.length === 2, "a checkpoint once space is back");
});

test("no checkpoint runs while a stop is under way, however much the guest writes meanwhile", async () => {
  let release!: () => void;
  let held = false;
  runtime.hooks.beforeStop = () =>
    new Promise<void>((resolve) => {
      held = true;
      release = resolve;
    });
  const stopping = daemons.call({ action: "stop", name: "ck" });
  await until(() => held, "the stop reached the VM");
  await looks(120, true);
  release();
  await stopping;
  await looks(60, true);
  expect(runtime.checkpoints).toHaveLength(2);
  const view = await inspectEntry(layout, "instances", "ck");
  // The stop took its own checkpoint: the automatic one is no longer shown.
  expect(view.checkpoint).toEqual({ everyMs: 30_000 });
  expect(formatView(view)).toContain("checkpoint:  every 30s of use\n");
});
