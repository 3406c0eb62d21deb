// Suspend and the start after it, without QEMU: the daemon's InstanceController in-process over
// the local runtime, whose suspend leaves the "guest"'s processes running (the agent daemon, its
// services, background commands) for the next boot to "resume", as a real resume finds them in
// memory; without them that boot is cold, with the reason. The real thing: suspend.vm.test.ts.
import { stat } from "node:fs/promises";
import { join } from "node:path";
import { StateLayout } from "../src/client/index.js";
import { formatView } from "../src/actions/kit/text.js";
import { inspectEntry } from "../src/state/inspect.js";
import { readStatus } from "../src/state/records.js";
import { LOCAL_SUSPEND_MARKER } from "../src/testing-runtime.js";
import { fetchText, type LocalRuntime } from "../src/testing.js";
import { localSandbox, type LocalDaemons, type LocalSandbox, type Loose } from "./support/local-daemon.js";

const YAML = `version: 1
profile: tiny
diskGiB: 4
setup:
  - printf 'Hello from setup\\n' > index.html
resume:
  - date +%s%N >> resumed.txt
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

beforeEach(async () => {
  sandbox = await localSandbox("pisb-susp-", YAML);
  ({ dir, layout, runtime, daemons } = sandbox);
});

afterEach(() => sandbox.close());

const daemon = (name: string) => daemons.daemon(name);
const call = (action: Loose, progress?: string[]) => daemons.call(action, progress);

const exec = async (name: string, cmd: string) => (await call({ action: "exec", name, cmd })).output as string;

test("suspend keeps processes, services and previews; start resumes them without resume hooks", async () => {
  const created = await call({ action: "create", name: "warm", config: join(dir, "sandbox.yaml") });
  const url = created.previews[0].url as string;
  expect(created.lastStart).toMatchObject({ warm: false, ms: expect.any(Number) });
  const sleeper = (await exec("warm", "sleep 1000 > /dev/null 2>&1 & echo $!")).trim();
  const servicePid = (await call({ action: "services", name: "warm", op: "status" })).services[0].pid as number;
  expect(await exec("warm", "wc -l < resumed.txt")).toBe("1\n");
  // An ad-hoc preview of a port a background command serves (the local guest shares host ports).
  const port = 20_000 + Math.floor(Math.random() * 10_000);
  await exec("warm", `python3 -m http.server ${port} --bind 127.0.0.1 > /dev/null 2>&1 &`);
  const adHoc = (await call({ action: "preview", name: "warm", port, title: "docs" })).previews[0].url as string;
  for (let i = 0; i < 50 && !(await fetchText(adHoc).catch(() => "")).startsWith("200"); i++)
    await new Promise((r) => setTimeout(r, 100));
  const controller = await daemon("warm");

  const progress: string[] = [];
  const suspended = await call({ action: "suspend", name: "warm" }, progress);
  expect(suspended).toMatchObject({ state: "suspended", previews: [] });
  expect(progress).toContain("[suspend] closing previews and terminal clients; services keep running");
  expect(progress.some((p) => p.startsWith("[checkpoint] memory ("))).toBe(true);
  expect(controller.exiting).toBe(true); // the daemon exits, as after a stop
  await expect(fetch(url)).rejects.toThrow();
  expect((await readStatus(layout, "instances", "warm"))?.previews?.[0]?.url).toBe(url);

  const started: string[] = [];
  const view = await call({ action: "start", name: "warm" }, started);
  expect(view).toMatchObject({ state: "running", restore: { warm: true }, lastStart: { warm: true } });
  expect(Date.parse(view.lastStart.at)).toBeGreaterThan(Date.parse(created.lastStart.at));
  expect(view.previews[0].url).toBe(url);
  expect(await fetchText(url)).toBe("200 Hello from setup\n");
  expect(view.previews).toContainEqual({ service: `port-${port}`, url: adHoc, title: "docs" });
  expect(await fetchText(adHoc)).toMatch(/^200 /);
  expect(started.some((p) => p.startsWith("[boot] resumed from saved memory"))).toBe(true);
  expect(started.some((p) => p.startsWith("[resume]") || p.startsWith("[setup]"))).toBe(false);
  expect(await exec("warm", "wc -l < resumed.txt")).toBe("1\n");
  expect(await exec("warm", `kill -0 ${sleeper} && echo alive`)).toBe("alive\n");
  expect((await call({ action: "services", name: "warm", op: "status" })).services[0]).toMatchObject({
    pid: servicePid,
    state: "running",
  });
  expect(formatView(view as never)).toMatch(/^restore: {5}resumed from saved memory in \d+\.\d s$/m);
  expect(formatView(view as never)).toMatch(/^last start: {2}\d+\.\d s \(resumed\) at /m);

  // A stop after a warm start is a normal stop: the next start is cold and runs resume hooks.
  await call({ action: "stop", name: "warm" });
  const cold = await call({ action: "start", name: "warm" });
  expect(cold.restore).toBeUndefined();
  expect(cold.lastStart).toMatchObject({ warm: false });
  expect(await exec("warm", "wc -l < resumed.txt")).toBe("2\n");
  await call({ action: "stop", name: "warm" });
});

test("stop of a suspended instance deletes its saved memory: it reads stopped and starts cold", async () => {
  await call({ action: "create", name: "drop", config: join(dir, "sandbox.yaml") });
  await call({ action: "suspend", name: "drop" });
  const diskDir = layout.diskDir("instances", "drop");
  await stat(join(diskDir, LOCAL_SUSPEND_MARKER));

  const progress: string[] = [];
  expect(await call({ action: "stop", name: "drop" }, progress)).toMatchObject({ state: "stopped", previews: [] });
  expect(progress).toContain("[stop] saved memory deleted; the next start boots the same checkpoint cold");
  await expect(stat(join(diskDir, LOCAL_SUSPEND_MARKER))).rejects.toMatchObject({ code: "ENOENT" });
  expect(runtime.suspended.size).toBe(0);
  expect((await inspectEntry(layout, "instances", "drop")).state).toBe("stopped");

  const cold = await call({ action: "start", name: "drop" });
  expect(cold.restore).toBeUndefined();
  expect(await exec("drop", "wc -l < resumed.txt")).toBe("2\n");
  await call({ action: "stop", name: "drop" });
});

test("a suspend whose processes are gone starts cold with the reason; suspend then destroy leaves nothing", async () => {
  await call({ action: "create", name: "cold", config: join(dir, "sandbox.yaml") });
  await call({ action: "suspend", name: "cold" });
  const diskDir = layout.diskDir("instances", "cold");
  await stat(join(diskDir, LOCAL_SUSPEND_MARKER));
  // What a lost memory file is to a real VM: the suspended processes are gone.
  await runtime.suspended.get(diskDir)!.close();

  const progress: string[] = [];
  const view = await call({ action: "start", name: "cold" }, progress);
  const reason = "the suspended processes are gone";
  expect(view).toMatchObject({ state: "running", restore: { warm: false, reason } });
  expect(progress).toContain(`[boot] the saved memory was not used (${reason}); booting the same disk checkpoint cold`);
  expect(progress.some((p) => p.startsWith("[resume]"))).toBe(true);
  expect(await fetchText(view.previews[0].url as string)).toBe("200 Hello from setup\n");
  expect(formatView(view as never)).toContain(`restore:     booted cold: ${reason}`);
  await expect(stat(join(diskDir, LOCAL_SUSPEND_MARKER))).rejects.toMatchObject({ code: "ENOENT" });

  await call({ action: "suspend", name: "cold" });
  expect((await inspectEntry(layout, "instances", "cold")).state).toBe("suspended");
  expect(await call({ action: "destroy", name: "cold", confirm: "cold" })).toEqual({
    destroyed: "cold",
    kind: "instances",
  });
  expect(runtime.suspended.size).toBe(0);
  await expect(stat(layout.entryDir("instances", "cold"))).rejects.toMatchObject({ code: "ENOENT" });
  await expect(stat(diskDir)).rejects.toMatchObject({ code: "ENOENT" });
});
