// SIGKILL of an instance's daemon (its QEMU killed with it) in the middle of a memory checkpoint
// (its memory saved while the guest runs) and of a rewind, on one real instance shared by the file's tests in order. After each kill a
// `start` works and the instance serves its preview, `checkpoints` lists only whole checkpoints,
// and its disk directory holds no temp file or directory and no layer beyond its chain and run.
// Each kill is timed by what the daemon does: its status file (polled), or the file the step
// makes (inotify: the kill is sent from the watch's callback, with no await in between).
import { watch } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { StateLayout } from "../src/client/index.js";
import { readStatus } from "../src/state/records.js";
import { fetchText, makeSandbox, qemuFor, qemuGone, sleep, teardown, until, type Sandbox } from "../src/testing.js";

const NAME = "faulty";
const YAML = `profile: tiny
diskGiB: 4
setup:
  - printf 'v1\\n' > /workspace/index.html
services:
  web:
    command: python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
`;

let sandbox: Sandbox;
let call: Sandbox["call"];
let layout: StateLayout;
let disk: string;

beforeAll(async () => {
  sandbox = await makeSandbox("pbf-");
  await sandbox.writeConfig(YAML);
  call = sandbox.call;
  layout = new StateLayout(sandbox.home);
  disk = layout.diskDir("instances", NAME);
  await call({ action: "create", name: NAME, config: "sandbox.yaml" });
  await call({ action: "checkpoint", name: NAME, label: "v1" });
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

/** Writes the page the preview serves, synced: a kill after this must not lose it. */
async function writePage(text: string): Promise<void> {
  const result = await call({ action: "exec", name: NAME, cmd: `printf '${text}\\n' > /workspace/index.html && sync` });
  expect(result.exitCode).toBe(0);
}

async function page(): Promise<string> {
  const view = await call({ action: "inspect", name: NAME });
  return fetchText(view.previews[0].url as string);
}

const stateNow = async () => (await readStatus(layout, "instances", NAME))?.state;

async function daemonPid(): Promise<number> {
  return Number.parseInt(await readFile(layout.pidFile("instances", NAME), "utf8"), 10);
}

function kill(pid: number): void {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // already gone
  }
}

/** Kills the daemon `pid`, and any QEMU of this sandbox (it dies with its daemon; killed to be sure). */
async function killInstance(pid: number): Promise<void> {
  kill(pid);
  for (const qemu of qemuFor(sandbox.home)) kill(qemu);
  expect(await qemuGone(sandbox.home)).toEqual([]);
}

/**
 * Watches `dir` and SIGKILLs the daemon `pid` from the callback of the first entry `match`
 * accepts; resolves with that entry's name, after the kill. Rejects after `ms` without one.
 */
function killOnEntry(dir: string, match: (name: string) => boolean, pid: number, ms = 120_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      watcher.close();
      reject(new Error(`no ${dir} entry to kill on within ${ms} ms`));
    }, ms);
    const watcher = watch(dir, (_event, name) => {
      if (!name || !match(name)) return;
      kill(pid);
      watcher.close();
      clearTimeout(timer);
      resolve(name);
    });
  });
}

/** What an action the kill cut short answered: "done" or its error's code. */
const settled = (action: Promise<unknown>) =>
  action.then(
    () => "done",
    (error: { code?: string }) => error.code ?? String(error),
  );

/** Every checkpoint `checkpoints` lists is whole: its record and pointer, its layers, its memory. */
async function expectWholeCheckpoints(): Promise<{ id: string; label?: string; kind: string }[]> {
  const listed = (await call({ action: "checkpoints", name: NAME })).checkpoints as {
    id: string;
    label?: string;
    kind: string;
  }[];
  for (const checkpoint of listed) {
    const dir = join(disk, "checkpoints", checkpoint.id);
    const files = await readdir(dir);
    const record = JSON.parse(await readFile(join(dir, "checkpoint.json"), "utf8")) as { layers: string[] };
    expect(files).toEqual(expect.arrayContaining([...record.layers, "disk.json"]));
    if (checkpoint.kind === "memory") expect(files).toContain("memory.bin");
  }
  return listed;
}

/**
 * Once the instance runs again: no temp file or directory in its disk directory or under its
 * checkpoints, no layer the chain and the run do not name, and a directory for each listed
 * checkpoint only.
 */
async function expectCleanDisk(): Promise<void> {
  const pointer = JSON.parse(await readFile(join(disk, "disk.json"), "utf8")) as { layers: string[] };
  const run = JSON.parse(await readFile(join(disk, "run.json"), "utf8")) as { layer: string; next?: string[] };
  const named = [...pointer.layers, run.layer, ...(run.next ?? [])];
  const top = await readdir(disk);
  expect(top.filter((f) => f.startsWith("layer-") && !named.includes(f))).toEqual([]);
  expect(top.filter((f) => f.startsWith(".tmp-") && !f.startsWith(".tmp-lock-"))).toEqual([]);
  const kept = await readdir(join(disk, "checkpoints"));
  const listed = await expectWholeCheckpoints();
  expect(kept.sort()).toEqual(listed.map((c) => c.id).sort());
}

async function startServing(want: readonly string[]): Promise<void> {
  const started = await call({ action: "start", name: NAME });
  expect(started.state).toBe("running");
  expect(want).toContain(await page());
  await expectCleanDisk();
}

test("SIGKILL while a memory checkpoint saves the guest's memory: start recovers, nothing half kept", async () => {
  await writePage("v2");
  const pid = await daemonPid();
  // The memory streams into a temp file of the disk directory while the guest runs on.
  const killed = killOnEntry(disk, (name) => name.startsWith(".tmp-memory-"), pid);
  const taking = settled(call({ action: "checkpoint", name: NAME, label: "k1", memory: true }));
  await killed;
  await killInstance(pid);
  expect(await taking).not.toBe("done");
  await expectWholeCheckpoints();
  await startServing(["200 v2\n"]);
});

test("SIGKILL while the memory checkpoint is being kept: start recovers, its temp directory is gone", async () => {
  await writePage("v3");
  const pid = await daemonPid();
  const killed = killOnEntry(join(disk, "checkpoints"), (name) => name.startsWith(".tmp-"), pid);
  const taking = settled(call({ action: "checkpoint", name: NAME, label: "k2", memory: true }));
  await killed;
  await killInstance(pid);
  expect(await taking).not.toBe("done");
  const kept = await expectWholeCheckpoints();
  expect(kept.filter((c) => c.label === "k2").every((c) => c.kind === "memory")).toBe(true);
  // The kill lands mid-keep as a rule: its temp directory, with links to the layers and memory,
  // is left for the start to remove, as is the memory the disk directory held for the keep.
  await startServing(["200 v3\n"]);
});

test("SIGKILL while a rewind links a memory checkpoint back: start gives the state before or after it", async () => {
  await writePage("m");
  await call({ action: "checkpoint", name: NAME, label: "mem", memory: true });
  await writePage("v4");
  const pid = await daemonPid();
  // The disk directory holds no memory.bin while the instance runs: the rewind's link makes it.
  const killed = killOnEntry(disk, (name) => name === "memory.bin", pid);
  const rewinding = settled(call({ action: "rewind", name: NAME, checkpoint: "mem" }));
  await killed;
  await killInstance(pid);
  expect(await rewinding).not.toBe("done");
  const kept = await expectWholeCheckpoints();
  // What it left was kept whole first.
  expect(kept.map((c) => c.label)).toContain("before rewind to mem");
  await startServing(["200 v4\n", "200 m\n"]);
});

test("SIGKILL while a rewind to a disk checkpoint boots it: start boots that checkpoint", async () => {
  const pid = await daemonPid();
  const rewinding = settled(call({ action: "rewind", name: NAME, checkpoint: "v1" }));
  await until("the rewound disk's boot", async () => (await stateNow()) === "starting", 60_000, 10);
  await sleep(1_000);
  await killInstance(pid);
  expect(await rewinding).not.toBe("done");
  await expectWholeCheckpoints();
  await startServing(["200 v1\n"]);
  // Each kept checkpoint still rewinds: the last one made before the kills, too.
  const back = await call({ action: "rewind", name: NAME, checkpoint: "mem" });
  expect(back).toMatchObject({ state: "running", restore: { warm: true } });
  expect(await page()).toBe("200 m\n");
  await expectCleanDisk();
});
