// Auto-suspend without QEMU: the daemon's InstanceController in-process over the local runtime
// (whose suspend keeps the "guest"'s processes for the next boot to resume), looked at once a
// quarter second instead of the daemon's every second. The real thing: auto-suspend.vm.test.ts.
import { join } from "node:path";
import { StateLayout } from "../src/client/index.js";
import { formatView } from "../src/actions/kit/text.js";
import { inspectEntry } from "../src/state/inspect.js";
import { readRecord, readStatus, writeRecord } from "../src/state/records.js";
import { fetchText, type InstanceController, type LocalRuntime } from "../src/testing.js";
import { localSandbox, type LocalDaemons, type LocalSandbox, type Loose } from "./support/local-daemon.js";

const YAML = `version: 1
profile: tiny
diskGiB: 4
idle:
  suspendAfter: 15m
setup:
  - printf 'Hello from setup\\n' > index.html
services:
  web:
    command: python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
`;

let dir: string;
let layout: StateLayout;
let runtime: LocalRuntime;
let daemons: LocalDaemons;
let sandbox: LocalSandbox;

beforeAll(async () => {
  sandbox = await localSandbox("pisb-idle-", YAML);
  ({ dir, layout, runtime, daemons } = sandbox);
});

afterAll(() => sandbox.close());

const call = (action: Loose, progress?: string[]) => daemons.call(action, progress);

/** Looks at the instance as the daemon does (every 250 ms here) until it suspended itself. */
async function untilAsleep(controller: InstanceController, withinMs = 15_000): Promise<void> {
  for (const deadline = Date.now() + withinMs; Date.now() < deadline;) {
    controller.checkIdle();
    if (controller.asleep && (await readStatus(layout, "instances", "idle"))?.state === "suspended") return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error("the instance did not suspend itself");
}

test("an unused instance suspends itself with its previews bound; a request, then an action, wakes it; stop ends it", async () => {
  const created = await call({ action: "create", name: "idle", config: join(dir, "sandbox.yaml"), idleSuspend: "20s" });
  expect(created.idle).toMatchObject({ suspendAfterMs: 20_000 });
  const url = created.previews[0].url as string;
  // 20 s is the shortest a test may ask for; this one shortens it to 1.5 s behind the schema's back.
  await call({ action: "stop", name: "idle" });
  const record = (await readRecord(layout, "instances", "idle"))!;
  await writeRecord(layout, { ...record, config: { ...record.config, idle: { suspendAfterMs: 1_500 } } });
  await call({ action: "start", name: "idle" });
  const sleeper = (
    (await call({ action: "exec", name: "idle", cmd: "sleep 1000 > /dev/null 2>&1 & echo $!" })).output as string
  ).trim();
  const controller = await daemons.daemon("idle");

  await untilAsleep(controller);
  expect(runtime.live.size).toBe(0);
  expect(controller.exiting).toBe(false);
  const asleep = await inspectEntry(layout, "instances", "idle");
  expect(asleep).toMatchObject({ state: "suspended", idle: { suspendAfterMs: 1_500, suspended: true } });
  expect(formatView(asleep)).toContain("state:       suspended (idle)");
  expect(asleep.previews[0]?.url).toBe(url);

  // The preview is still bound: its first request resumes the instance and gets the page.
  expect(await fetchText(url)).toBe("200 Hello from setup\n");
  // It was answered as soon as the guest was back; an action waits for the whole start.
  expect((await call({ action: "exec", name: "idle", cmd: `kill -0 ${sleeper} && echo alive` })).output).toBe(
    "alive\n",
  );
  const woken = await inspectEntry(layout, "instances", "idle");
  expect(woken).toMatchObject({ state: "running", restore: { warm: true } });
  expect(woken.idle?.suspended).toBeUndefined();

  await untilAsleep(controller);
  const progress: string[] = [];
  expect((await call({ action: "exec", name: "idle", cmd: "echo awake" }, progress)).output).toBe("awake\n");
  expect(progress).toContain("[boot] resuming idle (suspended while unused) for exec");

  await untilAsleep(controller);
  expect(await call({ action: "stop", name: "idle" })).toMatchObject({ state: "stopped", previews: [] });
  await expect(fetch(url)).rejects.toThrow();
  expect(controller.exiting).toBe(true);
});
