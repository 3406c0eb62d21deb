// Kept checkpoints, rewind and fork without QEMU: the daemon's InstanceController in-process over
// the local runtime, whose "disk" is a directory of host files (a kept checkpoint is a copy of
// them; processes are never copied, so a memory checkpoint or fork resumes cold here). What the
// controller adds around the disk is tested here: labels, pruning, the state left kept before a
// rewind, the fork's record and identity, refusals. The real thing: branches.vm.test.ts.
import { rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { readRecord, readStatus } from "../src/state/records.js";
import { checkpointsToPrune } from "../src/state/checkpoints.js";
import { formatView } from "../src/actions/kit/text.js";
import { inspectEntry } from "../src/state/inspect.js";
import type { KeptCheckpointInfo } from "../src/daemon/runtime.js";
import { checkpoints as checkpointsAction } from "../src/actions/checkpoints.js";
import { fetchText } from "../src/testing.js";
import { localSandbox, type LocalSandbox, type Loose } from "./support/local-daemon.js";

const YAML = `version: 1
profile: tiny
diskGiB: 4
checkpoint:
  keep: 3
setup:
  - printf 'v1\\n' > state.txt
`;

let sandbox: LocalSandbox;

beforeEach(async () => {
  sandbox = await localSandbox("pisb-branch-", YAML);
});

afterEach(() => sandbox.close());

const call = (action: Loose, progress?: string[]) => sandbox.daemons.call(action, progress);
const exec = async (name: string, cmd: string) => (await call({ action: "exec", name, cmd })).output as string;
const list = async (name: string) =>
  (await checkpointsAction.run(
    { action: "checkpoints", name },
    {
      layout: sandbox.layout,
      cwd: sandbox.dir,
      env: process.env,
      actions: [],
    },
  )) as Loose;

test("a kept checkpoint is listed, and rewind by label brings its files back and keeps the state it left", async () => {
  await call({ action: "create", name: "app", config: join(sandbox.dir, "sandbox.yaml") });
  const taken = await call({ action: "checkpoint", name: "app", label: "first" });
  expect(taken.checkpoint).toMatchObject({ id: expect.stringMatching(/^[0-9a-f]{12}$/), label: "first", kind: "disk" });
  expect(taken.pruned).toEqual([]);
  await exec("app", "printf 'v2\\n' > state.txt");
  expect((await list("app")).checkpoints.map((c: Loose) => c.label)).toEqual(["first"]);
  const view = await inspectEntry(sandbox.layout, "instances", "app");
  expect(view.kept).toMatchObject({ count: 1, newest: { label: "first", kind: "disk" } });
  expect(formatView(view)).toMatch(/^kept: {8}1 checkpoint\(s\), .* newest [0-9a-f]{12} \(disk, first\)/m);

  const progress: string[] = [];
  const rewound = await call({ action: "rewind", name: "app", checkpoint: "first" }, progress);
  expect(rewound.state).toBe("running");
  expect(rewound.rewound).toMatchObject({ id: taken.checkpoint.id, label: "first" });
  expect(rewound.before).toMatchObject({ label: "before rewind to first" });
  expect(await exec("app", "cat state.txt")).toBe("v1\n");
  expect(progress.join("\n")).toContain(`rewinding app to disk checkpoint ${taken.checkpoint.id}`);

  // The state it left is a checkpoint too: the rewind can be undone.
  await call({ action: "rewind", name: "app", checkpoint: rewound.before.id });
  expect(await exec("app", "cat state.txt")).toBe("v2\n");
});

test("an unknown checkpoint, a memory checkpoint of a stopped instance and a template are refused with what to do", async () => {
  await call({ action: "create", name: "app", config: join(sandbox.dir, "sandbox.yaml") });
  await expect(call({ action: "rewind", name: "app", checkpoint: "nope" })).rejects.toMatchObject({
    code: "CONTROLLER_NOT_FOUND",
    hint: expect.stringContaining('"action":"checkpoints"'),
  });
  await call({ action: "stop", name: "app" });
  await expect(call({ action: "checkpoint", name: "app", memory: true })).rejects.toMatchObject({
    code: "CONTROLLER_NOT_RUNNING",
    message: expect.stringContaining("no memory to keep"),
  });
  // A stopped instance's disk can be kept, and rewinding it starts it.
  const kept = await call({ action: "checkpoint", name: "app" });
  expect(kept.checkpoint.kind).toBe("disk");
  expect((await call({ action: "rewind", name: "app", checkpoint: kept.checkpoint.id })).state).toBe("running");
});

test("checkpoint.keep prunes the oldest unpinned checkpoints, never a pinned one", async () => {
  await call({ action: "create", name: "app", config: join(sandbox.dir, "sandbox.yaml") });
  const pinned = await call({ action: "checkpoint", name: "app", label: "keeper", pin: true });
  const ids: string[] = [];
  for (let i = 0; i < 4; i++)
    ids.push((await call({ action: "checkpoint", name: "app", label: `n${i}` })).checkpoint.id);
  const now = (await list("app")).checkpoints as Loose[];
  expect(now.map((c) => c.label)).toEqual(["keeper", "n2", "n3"]);
  expect(now[0]).toMatchObject({ id: pinned.checkpoint.id, pinned: true });
  const removed = await call({ action: "checkpoint-rm", name: "app", checkpoint: "n2" });
  expect(removed.removed.id).toBe(ids[2]);
  expect(((await list("app")).checkpoints as Loose[]).map((c) => c.label)).toEqual(["keeper", "n3"]);
});

test("pruning by bytes removes the oldest unpinned ones until both limits hold", () => {
  const k = (id: string, bytes: number, pinned = false): KeptCheckpointInfo => ({
    id,
    bytes,
    pinned,
    version: 1,
    createdAt: id,
    memory: false,
    generation: 0,
    layers: [],
  });
  const kept = [k("a", 10, true), k("b", 10), k("c", 10), k("d", 10)];
  expect(checkpointsToPrune(kept, { count: 10, bytes: 25 }, "d").map((c) => c.id)).toEqual(["b", "c"]);
  expect(checkpointsToPrune(kept, { count: 2, bytes: 1000 }, "d").map((c) => c.id)).toEqual(["b", "c"]);
  expect(checkpointsToPrune(kept, { count: 1, bytes: 0 }, "d").map((c) => c.id)).toEqual(["b", "c"]);
});

test("fork copies the files into new instances with their own record; each start gives its own identity", async () => {
  await call({ action: "create", name: "src", config: join(sandbox.dir, "sandbox.yaml") });
  await exec("src", "printf 'work\\n' > work.txt");
  const boots = sandbox.runtime.boots;
  const forked = await call({ action: "fork", name: "src", names: ["src-a", "src-b"] });
  expect(forked).toMatchObject({ source: "src", forks: [{ name: "src-a" }, { name: "src-b" }] });
  // The source ran before: its memory was kept while it ran on, never stopped or booted again;
  // the checkpoint the forks were made of is not kept.
  expect(sandbox.runtime.boots).toBe(boots);
  expect((await readStatus(sandbox.layout, "instances", "src"))?.state).toBe("running");
  expect((await list("src")).checkpoints).toEqual([]);
  const record = await readRecord(sandbox.layout, "instances", "src-a");
  expect(record).toMatchObject({ forkedFrom: { name: "src" }, pendingCreate: { newIdentity: true, fork: true } });
  expect((await inspectEntry(sandbox.layout, "instances", "src-a")).forkedFrom).toMatchObject({ name: "src" });
  const started = await call({ action: "start", name: "src-a" });
  expect(started.state).toBe("running");
  expect(await exec("src-a", "cat work.txt")).toBe("work\n");
  expect(sandbox.runtime.identities).toContain("src-a");
  // Until its first checkpoint, a crash would give it its identity again at the next start.
  await call({ action: "checkpoint", name: "src-a" });
  expect((await readRecord(sandbox.layout, "instances", "src-a"))?.pendingCreate).toBeUndefined();
  // The fork is independent: its writes do not reach the source.
  await exec("src-a", "printf 'fork\\n' > work.txt");
  expect(await exec("src", "cat work.txt")).toBe("work\n");
  await expect(call({ action: "fork", name: "src", names: ["src-a"] })).rejects.toMatchObject({
    code: "CONTROLLER_ALREADY_EXISTS",
  });
});

test("fork --from copies a kept checkpoint, not the instance now, and leaves the running source unpaused", async () => {
  await call({ action: "create", name: "src", config: join(sandbox.dir, "sandbox.yaml") });
  await exec("src", "printf 'then\\n' > work.txt");
  const kept = (await call({ action: "checkpoint", name: "src", label: "then" })).checkpoint;
  await exec("src", "printf 'now\\n' > work.txt");
  const boots = sandbox.runtime.boots;
  const progress: string[] = [];
  const forked = await call({ action: "fork", name: "src", names: ["src-then"], from: "then" }, progress);
  expect(forked).toMatchObject({ source: "src", forks: [{ name: "src-then", kind: "disk" }], from: { id: kept.id } });
  expect(forked.pauseMs).toBeUndefined();
  expect(progress.join("\n")).not.toContain("pausing");
  // The source was neither suspended nor started again.
  expect(sandbox.runtime.boots).toBe(boots);
  expect(await exec("src", "cat work.txt")).toBe("now\n");
  expect((await readRecord(sandbox.layout, "instances", "src-then"))?.forkedFrom).toMatchObject({ name: "src" });
  await call({ action: "start", name: "src-then" });
  expect(await exec("src-then", "cat work.txt")).toBe("then\n");
  await expect(call({ action: "fork", name: "src", names: ["src-x"], from: "nope" })).rejects.toMatchObject({
    code: "CONTROLLER_NOT_FOUND",
    hint: expect.stringContaining('"action":"checkpoints"'),
  });
  expect(await readRecord(sandbox.layout, "instances", "src-x")).toBeUndefined();
});

test("a state directory removed under a running instance: its daemon notices, stops the VM and exits", async () => {
  await call({ action: "create", name: "gone", config: join(sandbox.dir, "sandbox.yaml") });
  const controller = await sandbox.daemons.daemon("gone");
  const t0 = Date.now();
  await controller.checkStateDir(t0);
  expect(controller.running).toBe(true);
  await rm(sandbox.layout.entryDir("instances", "gone"), { recursive: true, force: true });
  const stderr: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((chunk: string) => (stderr.push(String(chunk)), true)) as typeof process.stderr.write;
  try {
    // Not before its next look (every 10 s), then at once.
    await controller.checkStateDir(t0 + 5_000);
    expect(controller.running).toBe(true);
    await controller.checkStateDir(t0 + 10_000);
  } finally {
    process.stderr.write = write;
  }
  expect(controller.running).toBe(false);
  expect(controller.exiting).toBe(true);
  expect(sandbox.runtime.live.size).toBe(0);
  expect(stderr.join("")).toContain("the state directory of instance gone");
});

test("a fork of a serving instance never stops it: a preview request while its memory is kept is answered", async () => {
  await writeFile(
    join(sandbox.dir, "web.yaml"),
    `version: 1
profile: tiny
diskGiB: 4
setup:
  - printf 'hello\\n' > index.html
services:
  web:
    command: python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
`,
  );
  const created = await call({ action: "create", name: "web", config: join(sandbox.dir, "web.yaml") });
  const url = created.previews[0].url as string;
  expect(await fetchText(url)).toBe("200 hello\n");
  // Hold the checkpoint the fork is made of until a request was answered.
  let release!: () => void;
  let held!: () => void;
  const holding = new Promise<void>((resolve) => (held = resolve));
  sandbox.runtime.hooks.onCheckpoint = async (name) => {
    if (name !== "web") return;
    held();
    await new Promise<void>((resolve) => (release = resolve));
  };
  const boots = sandbox.runtime.boots;
  const forked = call({ action: "fork", name: "web", names: ["web-b"] });
  await holding;
  expect(await fetchText(url)).toBe("200 hello\n");
  expect((await readStatus(sandbox.layout, "instances", "web"))?.state).toBe("running");
  release();
  sandbox.runtime.hooks.onCheckpoint = undefined;
  await forked;
  // The source ran on: never booted again.
  expect(sandbox.runtime.boots).toBe(boots);
  expect(await fetchText(url)).toBe("200 hello\n");
});
