// Parking without QEMU: real daemons (runDaemon) and the waker (runWaker) in the test process over
// the local runtime. An instance that suspended itself is parked (its daemon exits, the waker holds
// its preview); a request has the waker start a daemon that takes the preview back and wakes it;
// an action's daemon takes it back too; stop of a parked instance ends it. The real thing, through
// the CLI's processes: parked.vm.test.ts.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction } from "../src/client/index.js";
import { runDaemon } from "../src/daemon/server.js";
import { inspectEntry } from "../src/state/inspect.js";
import { StateLayout } from "../src/state/layout.js";
import { readRecord, writeRecord } from "../src/state/records.js";
import { wakerHolding } from "../src/state/waker-call.js";
import { createLocalRuntime, fetchText, type LocalRuntime, type LooseResult } from "../src/testing.js";
import { runWaker } from "../src/waker/waker.js";
import { untilAnswers } from "./support/in-process-daemon.js";

const YAML = `version: 1
profile: tiny
diskGiB: 4
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
let env: NodeJS.ProcessEnv;
const daemons: Promise<number>[] = [];
const wakerLog: string[] = [];
const endWaker = new AbortController();
let waker: Promise<number>;

/** Runs the daemon of `nap` in-process (as the client or the waker spawns one); resolves with its run. */
function daemon(): Promise<number> {
  const run = runDaemon(layout, "instances", "nap", { runtime, idleExitMs: 1000 });
  daemons.push(run);
  return run;
}

const call = (action: Record<string, unknown>, progress: string[] = []) =>
  callAction(action, {
    env,
    cwd: dir,
    onProgress: (e) => progress.push(`[${e.stage}] ${e.message}`),
  }) as Promise<LooseResult>;

/** Resolves once `run` (a daemon) exited, or fails after `ms` with the waker's log. */
async function exited(run: Promise<number>, ms = 30_000): Promise<number> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the daemon did not park; the waker said:\n${wakerLog.join("\n")}`)), ms);
  });
  try {
    return await Promise.race([run, late]);
  } finally {
    clearTimeout(timer);
  }
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-park-"));
  layout = new StateLayout(join(dir, "state"));
  await layout.ensurePrivate();
  env = { ...process.env, PI_SANDBOX_HOME: layout.root };
  runtime = createLocalRuntime();
  await writeFile(join(dir, "sandbox.yaml"), YAML);
  // The waker of this state root, in-process: the daemons find it running and hand it their previews.
  waker = runWaker(
    { socket: layout.wakerSocketPath(), pidFile: layout.wakerPidFile() },
    {
      spawnDaemon: async () => {
        const run = daemon();
        return run;
      },
      log: (line) => wakerLog.push(line),
      emptyGraceMs: 600_000,
      signal: endWaker.signal,
    },
  );
});

afterAll(async () => {
  endWaker.abort();
  await waker;
  await Promise.allSettled(daemons);
  for (const vm of [...runtime.live, ...runtime.suspended.values()]) await vm.close();
  await rm(dir, { recursive: true, force: true });
});

test("a parked instance's daemon exits, the waker holds its preview; a request, then an action, wakes it; stop ends it", async () => {
  let run = daemon();
  await untilAnswers(layout, "nap", run);
  const created = await call({ action: "create", name: "nap", config: "sandbox.yaml", idleSuspend: "20s" });
  const url = created.previews[0].url as string;
  // 20 s is the shortest a test may ask for; shortened to 1.5 s behind the schema's back.
  await call({ action: "stop", name: "nap" });
  await run;
  const record = (await readRecord(layout, "instances", "nap"))!;
  await writeRecord(layout, { ...record, config: { ...record.config, idle: { suspendAfterMs: 1_500 } } });
  run = daemon();
  await untilAnswers(layout, "nap", run);
  await call({ action: "start", name: "nap" });
  const sleeper = (
    (await call({ action: "exec", name: "nap", cmd: "sleep 1000 > /dev/null 2>&1 & echo $!" })).output as string
  ).trim();

  // Unused: it suspends itself, then its daemon parks it and exits.
  expect(await exited(run)).toBe(0);
  expect(runtime.live.size).toBe(0);
  const parked = await inspectEntry(layout, "instances", "nap");
  expect(parked).toMatchObject({ state: "suspended", idle: { suspendAfterMs: 1_500, suspended: true } });
  expect(parked.daemonPid).toBeUndefined();
  expect(parked.previews[0]?.url).toBe(url);
  expect([...(await wakerHolding(layout))]).toEqual(["nap"]);

  // A request: the waker starts a daemon, which takes the preview back and resumes the instance.
  expect(await fetchText(url)).toBe("200 Hello from setup\n");
  expect([...(await wakerHolding(layout))]).toEqual([]);
  expect((await call({ action: "exec", name: "nap", cmd: `kill -0 ${sleeper} && echo alive` })).output).toBe("alive\n");
  expect(await inspectEntry(layout, "instances", "nap")).toMatchObject({ state: "running", restore: { warm: true } });

  // Parked again; an action's daemon (the client spawns it; here in-process) takes it back and wakes it.
  expect(await exited(daemons.at(-1)!)).toBe(0);
  run = daemon();
  await untilAnswers(layout, "nap", run);
  expect([...(await wakerHolding(layout))]).toEqual([]);
  expect((await inspectEntry(layout, "instances", "nap")).idle?.suspended).toBe(true);
  const progress: string[] = [];
  expect((await call({ action: "exec", name: "nap", cmd: "echo awake" }, progress)).output).toBe("awake\n");
  expect(progress).toContain("[boot] resuming nap (suspended while unused) for exec");

  // Parked again; stop: its daemon takes the preview back, drops the saved memory and exits.
  expect(await exited(run)).toBe(0);
  run = daemon();
  await untilAnswers(layout, "nap", run);
  expect(await call({ action: "stop", name: "nap" })).toMatchObject({ state: "stopped", previews: [] });
  expect(await run).toBe(0);
  await expect(fetch(url)).rejects.toThrow();
  expect([...(await wakerHolding(layout))]).toEqual([]);
  expect(runtime.live.size).toBe(0);
});
