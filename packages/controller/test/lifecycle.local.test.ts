// Every lifecycle transition and race of the daemon, without QEMU: the daemon's InstanceController
// runs in-process over the local runtime (host processes, the real Python agent, real previews).
import { spawnSync } from "node:child_process";
import { mkdir, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import { ControllerError, StateLayout } from "../src/client/index.js";
import { parseConfig } from "@pi-sandbox/config";
import { formatView } from "../src/actions/kit/text.js";
import { inspectEntry, type EntryView } from "../src/state/inspect.js";
import { readRecord, writeRecord, writeStatus } from "../src/state/records.js";
import type { EntryKind } from "../src/state/layout.js";
import { fetchText, sleep, type LocalRuntime } from "../src/testing.js";
import { LOCAL_RUN_MARKER } from "../src/testing-runtime.js";
import { localSandbox, type LocalDaemons, type LocalSandbox, type Loose } from "./support/local-daemon.js";

const YAML = (extra = "") => `version: 1
profile: tiny
diskGiB: 4
setup:
  - printf 'Hello from setup\\n' > index.html
services:
  web:
    command: python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
${extra}`;

let dir: string;
let layout: StateLayout;
let runtime: LocalRuntime;
let daemons: LocalDaemons;
let sandbox: LocalSandbox;

beforeEach(async () => {
  sandbox = await localSandbox("pisb-ctl-", YAML());
  ({ dir, layout, runtime, daemons } = sandbox);
});

afterEach(() => sandbox.close());

const daemon = (name: string, kind?: EntryKind) => daemons.daemon(name, kind);
const call = (action: Loose, progress?: string[]) => daemons.call(action, progress);

const create = (name: string, extra: Loose = {}) =>
  call({ action: "create", name, config: join(dir, "sandbox.yaml"), ...extra });

test("create runs setup and services and opens the preview; stop and start keep files and URL without setup", async () => {
  const progress: string[] = [];
  const created = await create("demo");
  expect(created).toMatchObject({
    state: "running",
    accelerator: "local",
    acceleratorReason: "host processes (tests)",
  });
  expect(created.setup).toMatchObject({ exitCode: 0 });
  const url = created.previews[0].url as string;
  expect(await fetchText(url)).toBe("200 Hello from setup\n");
  // Until the first checkpoint a crash drops the run, setup's work with it: the record still says so.
  expect((await readRecord(layout, "instances", "demo"))?.pendingCreate).toBeDefined();
  await expect(create("demo")).rejects.toMatchObject({ hint: expect.stringMatching(/^Start it/) });

  const exec = await call({ action: "exec", name: "demo", cmd: "echo hi > note.txt; cat note.txt" });
  expect(exec).toMatchObject({ running: false, exitCode: 0, output: "hi\n" });
  expect(typeof exec.pid).toBe("string");

  expect(await call({ action: "stop", name: "demo" }, progress)).toMatchObject({ state: "stopped", previews: [] });
  expect((await readRecord(layout, "instances", "demo"))?.pendingCreate).toBeUndefined();
  await expect(fetch(url)).rejects.toThrow();
  const started = await call({ action: "start", name: "demo" }, progress);
  expect(started.state).toBe("running");
  expect(started.previews[0].url).toBe(url);
  expect(progress.some((p) => p.startsWith("[setup]"))).toBe(false);
  expect(started.setup).toEqual(created.setup); // the create's setup outcome outlives its daemon
  expect((await call({ action: "exec", name: "demo", cmd: "cat note.txt" })).output).toBe("hi\n");
  await call({ action: "stop", name: "demo" });
});

// Linux: every 127/8 address is bindable, so each instance's previews get one of their own.
(process.platform === "linux" ? test : test.skip)(
  "each instance's previews live on a loopback address of its own, kept across stop and start; destroy frees it",
  async () => {
    const a = await create("addr-a");
    const b = await create("addr-b");
    const urlA = new URL(a.previews[0].url as string);
    const urlB = new URL(b.previews[0].url as string);
    expect(urlA.hostname).toMatch(/^127\.(?!0\.)\d+\.\d+\.\d+$/);
    expect(urlB.hostname).toMatch(/^127\.(?!0\.)\d+\.\d+\.\d+$/);
    expect(urlA.hostname).not.toBe(urlB.hostname);
    expect(a.previewAddress).toEqual({ address: urlA.hostname });
    expect(await fetchText(urlA.href)).toBe("200 Hello from setup\n");
    // The browser's 127.0.0.1 site is not this preview: nothing listens there on its port.
    await expect(fetch(`http://127.0.0.1:${urlA.port}/`)).rejects.toThrow();

    await call({ action: "stop", name: "addr-a" });
    const started = await call({ action: "start", name: "addr-a" });
    expect(started.previews[0].url).toBe(urlA.href);
    expect(await fetchText(urlA.href)).toBe("200 Hello from setup\n");

    await call({ action: "stop", name: "addr-b" });
    await call({ action: "destroy", name: "addr-b", confirm: "addr-b" });
    expect(await readdir(layout.addressesDir())).toEqual([urlA.hostname]);
    await call({ action: "stop", name: "addr-a" });
  },
);

test("a create that fails at boot leaves nothing, keeps the log, and runs again", async () => {
  runtime.hooks.beforeBoot = () => {
    throw new ControllerError("VM_START_FAILED", "the VM failed to boot: simulated");
  };
  const error = (await create("oops").catch((e: unknown) => e)) as ControllerError;
  expect(error.code).toBe("VM_START_FAILED");
  expect(error.hint).toMatch(/Nothing of oops was kept/);
  expect(error.details.logFile).toBe(layout.failedCreateLogFile("oops"));
  expect(await readFile(layout.failedCreateLogFile("oops"), "utf8")).toContain("create failed, removing oops");
  await expect(stat(layout.entryDir("instances", "oops"))).rejects.toMatchObject({ code: "ENOENT" });
  runtime.hooks = {};
  expect((await create("oops")).state).toBe("running");
  await call({ action: "stop", name: "oops" });
});

test("a create whose daemon died before setup is finished by start; create again is refused with that hint", async () => {
  // What a SIGKILLed create leaves: a disk, and the record with its pending part.
  await mkdir(layout.entryDir("instances", "half"), { recursive: true });
  await runtime.disks.createDisk(layout.diskDir("instances", "half"), { diskGiB: 4 });
  await writeRecord(layout, {
    kind: "instances",
    name: "half",
    createdAt: new Date().toISOString(),
    config: parseConfig(YAML(), { sourcePath: join(dir, "sandbox.yaml") }),
    pendingCreate: { configText: YAML() },
  });
  await expect(create("half")).rejects.toMatchObject({
    code: "CONTROLLER_ALREADY_EXISTS",
    hint: expect.stringMatching(/start runs the rest of the create, setup included/),
  });
  const progress: string[] = [];
  const started = await call({ action: "start", name: "half" }, progress);
  expect(progress).toContain("[boot] finishing the interrupted create of half");
  expect(started).toMatchObject({ state: "running", setup: { exitCode: 0 } });
  expect(await fetchText(started.previews[0].url)).toBe("200 Hello from setup\n");
  await call({ action: "stop", name: "half" });
  expect((await readRecord(layout, "instances", "half"))?.pendingCreate).toBeUndefined();
});

test("a create whose daemon died after setup keeps setup's work: start recovers the disk and runs no setup again", async () => {
  // What a create SIGKILLed after its setup leaves: the run still open on its disk (its writes
  // there), the record with its pending part, and the status naming setup done.
  await mkdir(layout.entryDir("instances", "late"), { recursive: true });
  const disk = layout.diskDir("instances", "late");
  await runtime.disks.createDisk(disk, { diskGiB: 4 });
  await mkdir(join(disk, "root/workspace"), { recursive: true });
  await writeFile(join(disk, "root/workspace/index.html"), "Hello from before the crash\n");
  await writeFile(join(disk, "root/workspace/.sandbox.yaml"), YAML());
  await writeFile(join(disk, LOCAL_RUN_MARKER), "");
  await writeRecord(layout, {
    kind: "instances",
    name: "late",
    createdAt: new Date().toISOString(),
    config: parseConfig(YAML(), { sourcePath: join(dir, "sandbox.yaml") }),
    pendingCreate: { configText: YAML() },
  });
  const setup = { exitCode: 0, at: new Date().toISOString() };
  await writeStatus(layout, "instances", "late", { state: "starting", updatedAt: setup.at, setup });
  const progress: string[] = [];
  const started = await call({ action: "start", name: "late" }, progress);
  expect(progress).toContain("[boot] the interrupted create had finished setup: its work is kept");
  expect(progress).not.toContain("[boot] finishing the interrupted create of late");
  expect(progress.some((line) => line.startsWith("[setup]"))).toBe(false);
  expect(started).toMatchObject({ state: "running", recovery: { outcome: "recovered" } });
  expect(formatView(started as EntryView)).toMatch(
    /^recovered: {3}the disk as of .*, when its controller stopped without a checkpoint$/m,
  );
  expect(await fetchText(started.previews[0].url)).toBe("200 Hello from before the crash\n");
  expect((await readRecord(layout, "instances", "late"))?.pendingCreate).toBeUndefined();
  await call({ action: "stop", name: "late" });
});

test("a failing setup is reported and the instance starts anyway; prepare with it publishes no template", async () => {
  await writeFile(join(dir, "bad.yaml"), YAML().replace("printf 'Hello from setup\\n' > index.html", "exit 3"));
  const created = await call({ action: "create", name: "badsetup", config: join(dir, "bad.yaml") });
  expect(created.state).toBe("running");
  expect(created.setup).toMatchObject({ exitCode: 3 });
  expect(created.errors).toEqual([expect.objectContaining({ code: "CONTROLLER_SETUP_FAILED" })]);
  await call({ action: "stop", name: "badsetup" });
  await expect(call({ action: "prepare", name: "tpl", config: join(dir, "bad.yaml") })).rejects.toMatchObject({
    code: "CONTROLLER_SETUP_FAILED",
  });
  await expect(stat(layout.entryDir("templates", "tpl"))).rejects.toMatchObject({ code: "ENOENT" });
});

test("prepare then create from the template: the template's files, no setup, an independent instance", async () => {
  const prepared = await call({ action: "prepare", name: "base", config: join(dir, "sandbox.yaml") });
  expect(prepared.state).toBe("prepared");
  expect(runtime.identities.at(-1)).toBe("base");
  runtime.identities.length = 0;
  const progress: string[] = [];
  const created = await call({ action: "create", name: "fromtpl", template: "base" }, progress);
  expect(progress.some((p) => p.startsWith("[setup]"))).toBe(false);
  expect(await fetchText(created.previews[0].url)).toBe("200 Hello from setup\n");
  // The copy got its own identity once, at its first boot (as every new guest does).
  expect(progress).toContain("[boot] giving the guest its own machine-id, hostname and ssh host keys");
  expect(runtime.identities).toEqual(["fromtpl"]);
  await call({ action: "stop", name: "fromtpl" });
  await call({ action: "start", name: "fromtpl" });
  expect(runtime.identities).toEqual(["fromtpl"]);
  await call({ action: "destroy", name: "base", confirm: "base", kind: "templates" });
  expect((await call({ action: "exec", name: "fromtpl", cmd: "cat index.html" })).output).toBe("Hello from setup\n");
  await call({ action: "stop", name: "fromtpl" });
});

test("prepare with suspend starts the services before it saves the guest; a service that cannot start publishes nothing", async () => {
  const progress: string[] = [];
  const prepared = await call(
    { action: "prepare", name: "warmbase", config: join(dir, "sandbox.yaml"), suspend: true },
    progress,
  );
  expect(prepared.state).toBe("prepared");
  expect(progress).toEqual(
    expect.arrayContaining([
      "[services] starting services, to be saved running",
      "[services] 1 service(s) running",
      "[checkpoint] saving the prepared disk and memory",
    ]),
  );
  // Host processes cannot be copied: this runtime's templates never carry memory.
  expect(prepared.savedMemory).toBeUndefined();

  await writeFile(
    join(dir, "broken.yaml"),
    YAML()
      .replace("python3 -m http.server $PORT --bind 127.0.0.1", "exit 7")
      .replace("    health: /", "    health: /\n    timeoutMs: 2000"),
  );
  await expect(
    call({ action: "prepare", name: "brokenbase", config: join(dir, "broken.yaml"), suspend: true }),
  ).rejects.toMatchObject({ message: expect.stringMatching(/no template was published$/) });
  await expect(stat(layout.entryDir("templates", "brokenbase"))).rejects.toMatchObject({ code: "ENOENT" });
});

test("an agent that fails on start leaves the instance failed with the error; the next start works", async () => {
  await create("flaky");
  await call({ action: "stop", name: "flaky" });
  runtime.hooks.beforeAgent = () => {
    throw new ControllerError("AGENT_START_FAILED", "simulated agent failure");
  };
  await expect(call({ action: "start", name: "flaky" })).rejects.toMatchObject({ code: "AGENT_START_FAILED" });
  expect(runtime.live.size).toBe(0);
  const failed = await inspectEntry(layout, "instances", "flaky");
  expect(failed.state).toBe("failed");
  expect(failed.errors).toEqual([expect.objectContaining({ code: "AGENT_START_FAILED" })]);
  runtime.hooks = {};
  expect((await call({ action: "start", name: "flaky" })).state).toBe("running");
  await call({ action: "stop", name: "flaky" });
});

test("concurrent callers: two starts boot once; guest actions before the boot and during a stop are typed", async () => {
  await create("race");
  await call({ action: "stop", name: "race" });
  const boots = runtime.boots;
  await expect(call({ action: "exec", name: "race", cmd: "true" })).rejects.toMatchObject({
    code: "CONTROLLER_NOT_RUNNING",
  });
  const [a, b] = await Promise.all([call({ action: "start", name: "race" }), call({ action: "start", name: "race" })]);
  expect(a.state).toBe("running");
  expect(b.state).toBe("running");
  expect(runtime.boots).toBe(boots + 1);
  const raceDaemon = await daemon("race");
  const slow = call({ action: "exec", name: "race", cmd: "sleep 20", timeoutMs: 30_000 }).catch((e: unknown) => e);
  await sleep(300);
  const stopped = await call({ action: "stop", name: "race" });
  expect(stopped.state).toBe("stopped");
  // The stop ends the command: the wait sees either its end by signal or the channel going away.
  const ended = (await slow) as Loose;
  if (ended instanceof ControllerError) {
    expect(ended).toMatchObject({ code: "CONTROLLER_NOT_RUNNING", message: "race stopped while exec was in flight" });
  } else expect(ended).toMatchObject({ running: false, signal: expect.any(String) });
  // Work sent to a daemon that decided to exit is refused, so the client spawns a fresh one.
  expect(raceDaemon.exiting).toBe(true);
  const late = raceDaemon.call({ action: "start", name: "race" }, { progress: () => undefined });
  await expect(late).rejects.toMatchObject({ code: "CONTROLLER_DAEMON_EXITING" });
});

test("a VM that exits by itself reads failed with the reason, and start recovers its run", async () => {
  await create("crashy");
  const controller = await daemon("crashy");
  const [vm] = [...runtime.live];
  await vm!.local.close();
  controller.checkVm();
  await controller.finished;
  const view = await inspectEntry(layout, "instances", "crashy");
  expect(view.state).toBe("failed");
  expect(view.errors).toEqual([expect.objectContaining({ code: "CONTROLLER_VM_EXITED" })]);
  // The run was kept, not discarded: the start recovers it.
  expect(await call({ action: "start", name: "crashy" })).toMatchObject({
    state: "running",
    recovery: { outcome: "recovered" },
  });
  await call({ action: "stop", name: "crashy" });
});

test("destroy needs the name as confirm, then removes everything", async () => {
  await create("gone");
  await expect(call({ action: "destroy", name: "gone", confirm: "nope" })).rejects.toMatchObject({
    code: "CONTROLLER_CONFIRM_MISMATCH",
  });
  expect(await call({ action: "destroy", name: "gone", confirm: "gone" })).toEqual({
    destroyed: "gone",
    kind: "instances",
  });
  expect(runtime.live.size).toBe(0);
  await expect(stat(layout.entryDir("instances", "gone"))).rejects.toMatchObject({ code: "ENOENT" });
});

test("SIGTERM (shutdown) during a boot lets the boot finish, then checkpoints", async () => {
  let release!: () => void;
  runtime.hooks.beforeBoot = () => new Promise<void>((resolve) => (release = resolve));
  const controller = await daemon("term");
  const creating = create("term");
  await sleep(200);
  const shutdown = controller.shutdown();
  release();
  expect((await creating).state).toBe("running");
  await shutdown;
  expect((await inspectEntry(layout, "instances", "term")).state).toBe("stopped");
  expect(runtime.live.size).toBe(0);
});

test("a guest .sandbox.yaml with 3,000 previewed services is refused at once; no listener opens; the daemon answers", async () => {
  const created = await create("hostile");
  const [vm] = [...runtime.live];
  const many =
    "version: 1\nservices:\n" +
    Array.from({ length: 3000 }, (_, i) => `  s${i}:\n    command: sleep 1000\n    preview: true\n`).join("");
  await writeFile(vm!.local.hostPath("/workspace/.sandbox.yaml"), many);
  const started = performance.now();
  await expect(call({ action: "services", name: "hostile", op: "ensure" })).rejects.toMatchObject({
    code: "SUPERVISOR_GUEST_CONFIG_INVALID",
    message: expect.stringMatching(/declares 3000 services; at most 64/),
  });
  const refusedMs = performance.now() - started;
  expect(refusedMs).toBeLessThan(10_000);
  const view = await inspectEntry(layout, "instances", "hostile");
  expect(view.previews).toEqual(created.previews);
  expect((await call({ action: "exec", name: "hostile", cmd: "echo still here" })).output).toBe("still here\n");
  await call({ action: "stop", name: "hostile" });
});

test(`ad-hoc previews stop at ${64} per instance with a typed error`, async () => {
  await create("manyprev");
  const opened: Loose[] = [];
  for (let port = 40_000; opened.length < 63; port++)
    opened.push(await call({ action: "preview", name: "manyprev", port }));
  await expect(call({ action: "preview", name: "manyprev", port: 41_000 })).rejects.toMatchObject({
    code: "CONTROLLER_PREVIEW_LIMIT",
  });
  // An existing preview can still be updated.
  expect((await call({ action: "preview", name: "manyprev", port: 40_000, title: "again" })).previews).toHaveLength(1);
  await call({ action: "stop", name: "manyprev" });
});

test("restart keeps a preview's links; ensure takes up the new preview configuration", async () => {
  const created = await create("links");
  expect(created.previews).toEqual([expect.objectContaining({ service: "web", title: "web" })]);
  const [vm] = [...runtime.live];
  const yaml = vm!.local.hostPath("/workspace/.sandbox.yaml");
  await writeFile(yaml, YAML().replace("preview: true", "preview: { url: /, title: Renamed }"));
  const restarted = await call({ action: "services", name: "links", op: "restart", service: "web" });
  expect(restarted.previews).toEqual([expect.objectContaining({ service: "web", title: "web" })]);
  const ensured = await call({ action: "services", name: "links", op: "ensure" });
  expect(ensured.previews).toEqual([
    expect.objectContaining({ service: "web", title: "Renamed", url: created.previews[0].url }),
  ]);
  await call({ action: "stop", name: "links" });
});

test("a daemon that is alive but does not answer reads unavailable with its pid; answering again reads running", async () => {
  await create("paused");
  daemons.silent.add("instances/paused");
  const view = await inspectEntry(layout, "instances", "paused");
  expect(view.state).toBe("unavailable");
  expect(view.hint).toMatch(new RegExp(`alive but does not answer.*kill ${process.pid}`));
  daemons.silent.delete("instances/paused");
  expect((await inspectEntry(layout, "instances", "paused")).state).toBe("running");
  await call({ action: "stop", name: "paused" });
});

test("an instance whose image is gone keeps its state and says so in errors", async () => {
  const image = join(dir, "image");
  await mkdir(image);
  await writeFile(join(dir, "img.yaml"), `${YAML()}image: ./image\n`);
  await call({ action: "create", name: "noimg", config: join(dir, "img.yaml") });
  await call({ action: "stop", name: "noimg" });
  await rm(image, { recursive: true });
  const view = await inspectEntry(layout, "instances", "noimg");
  expect(view.state).toBe("stopped");
  expect(view.errors).toEqual([
    expect.objectContaining({ code: "CONTROLLER_IMAGE_MISSING", hint: expect.any(String) }),
  ]);
});

test("a lost agent channel is reopened with the services untouched, at most 3 times in 10 minutes", async () => {
  const url = (await create("bridged")).previews[0].url as string;
  const controller = await daemon("bridged");
  const status = async () => (await call({ action: "services", name: "bridged", op: "status" })).services[0];
  const web = await status();
  // What a guest whose network helper restarts (or a stream that breaks) does to the agent's
  // channel, which runs over the agent's TCP door once attached.
  const cutChannel = () => [...runtime.live].find((vm) => vm.name === "bridged")!.local.dropConnections();
  for (let round = 1; round <= 3; round++) {
    expect(cutChannel()).toBe(1);
    let after: Loose | undefined;
    for (let i = 0; i < 100 && !after; i++) {
      controller.checkVm();
      await sleep(100);
      after = await status().catch(() => undefined);
    }
    expect(after).toMatchObject({ state: "running", pid: web.pid, port: web.port });
    expect((await inspectEntry(layout, "instances", "bridged")).state).toBe("running");
  }
  expect(await fetchText(url)).toBe("200 Hello from setup\n");
  // A fourth loss within the window: the instance checkpoints and fails, as for a lost agent.
  cutChannel();
  for (let i = 0; i < 100 && !controller.exiting; i++) {
    controller.checkVm();
    await sleep(100);
  }
  await controller.finished;
  expect((await inspectEntry(layout, "instances", "bridged")).state).toBe("failed");
});

test("an agent that goes away under a running VM: the instance checkpoints, reads failed with the reason, and start works", async () => {
  await create("orphan");
  await call({ action: "exec", name: "orphan", cmd: "echo kept > kept.txt" });
  const controller = await daemon("orphan");
  // The same path as an agent the host cut off for breaking the protocol (AGENT_PROTOCOL, which
  // supervisor's hostile-guest tests provoke): the channel closes with a reason under a live VM.
  // Only this instance's agent (its daemon and bridge): other suites' agents run on this host too.
  const stateDir = join(layout.diskDir("instances", "orphan"), "root", "var", "lib", "pi-sandbox-agent");
  expect(spawnSync("pkill", ["-KILL", "-f", "--", `--state-dir ${stateDir} `]).status).toBe(0);
  for (let i = 0; i < 100 && !controller.exiting; i++) {
    controller.checkVm();
    await sleep(100);
  }
  await controller.finished;
  const view = await inspectEntry(layout, "instances", "orphan");
  expect(view.state).toBe("failed");
  expect(view.errors).toEqual([
    expect.objectContaining({ code: "AGENT_CLOSED", message: expect.stringMatching(/guest agent of orphan is gone/) }),
  ]);
  expect(runtime.live.size).toBe(0);
  expect((await call({ action: "start", name: "orphan" })).state).toBe("running");
  expect((await call({ action: "exec", name: "orphan", cmd: "cat kept.txt" })).output).toBe("kept\n");
  await call({ action: "stop", name: "orphan" });
});

test("network.hostPorts: shown by inspect; a host port that is a preview's host port is refused at boot", async () => {
  // Another instance's preview holds a host port: a new instance may not open it to its guest.
  const first = await create("first");
  const previewPort = Number(new URL(first.previews[0].url as string).port);
  expect(first.hostPorts).toEqual([]);
  await call({ action: "stop", name: "first" });
  await writeFile(join(dir, "hp.yaml"), YAML(`network:\n  hostPorts: [${previewPort}]\n`));
  await expect(call({ action: "create", name: "second", config: join(dir, "hp.yaml") })).rejects.toMatchObject({
    code: "CONTROLLER_HOST_PORT_CONFLICT",
    message: expect.stringContaining(`${previewPort} (preview web of instance first)`),
    details: { conflicts: [{ port: previewPort, instance: "first", preview: "web" }] },
  });
  await expect(stat(layout.entryDir("instances", "second"))).rejects.toMatchObject({ code: "ENOENT" });

  // Its own previews too: a lease taken since (here written by hand) stops the next start.
  const free = await new Promise<number>((resolve) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
  await writeFile(join(dir, "hp.yaml"), YAML(`network:\n  hostPorts: [${free}, 11434]\n`));
  const third = await call({ action: "create", name: "third", config: join(dir, "hp.yaml") });
  expect(third).toMatchObject({ state: "running", hostPorts: [free, 11434] });
  expect(formatView(third as EntryView)).toContain(
    `host ports:  host.sandbox.internal:${free}, host.sandbox.internal:11434\n`,
  );
  await call({ action: "stop", name: "third" });
  await writeFile(layout.portsFile("third"), JSON.stringify({ version: 1, leases: { web: free } }));
  await expect(call({ action: "start", name: "third" })).rejects.toMatchObject({
    code: "CONTROLLER_HOST_PORT_CONFLICT",
    message: expect.stringContaining(`${free} (preview web of this instance)`),
  });
  const view = await inspectEntry(layout, "instances", "third");
  expect(view).toMatchObject({ state: "failed", hostPorts: [free, 11434] });
  expect(view.errors).toEqual([expect.objectContaining({ code: "CONTROLLER_HOST_PORT_CONFLICT" })]);
});

test("inspect of a record written before network.hostPorts existed shows none", async () => {
  await create("old");
  await call({ action: "stop", name: "old" });
  const record = (await readRecord(layout, "instances", "old"))!;
  const { hostPorts: _dropped, ...network } = record.config.network;
  await writeRecord(layout, { ...record, config: { ...record.config, network } as typeof record.config });
  expect((await inspectEntry(layout, "instances", "old")).hostPorts).toEqual([]);
  expect((await call({ action: "start", name: "old" })).state).toBe("running");
  await call({ action: "stop", name: "old" });
});
