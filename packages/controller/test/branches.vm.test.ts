// Checkpoints, rewind and fork on real VMs through the client API, one instance shared by the
// file's tests in order: a disk checkpoint while it serves, a memory one, rewinds to each (files,
// processes and previews as they were), then forks of the running instance that resume where it
// was, each with its own identity, randomness, previews and disk, while the source runs on, and a
// fork of a fork's kept memory checkpoint, which pauses nothing.
import { readdir } from "node:fs/promises";
import { StateLayout } from "../src/client/index.js";
import { fetchText, makeSandbox, teardown, type Sandbox } from "../src/testing.js";

let sandbox: Sandbox;
let call: Sandbox["call"];

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

beforeAll(async () => {
  sandbox = await makeSandbox("pbr-");
  await sandbox.writeConfig(YAML);
  call = sandbox.call;
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

const exec = async (name: string, cmd: string) =>
  (await call({ action: "exec", name, cmd, timeoutMs: 60_000 })).output as string;
const page = async (name: string) => {
  const view = await call({ action: "inspect", name });
  return fetchText(view.previews[0].url as string);
};

let sleeper = "";

test("a disk checkpoint while the instance serves stalls its disk for milliseconds and is listed", async () => {
  const created = await call({ action: "create", name: "src", config: "sandbox.yaml" });
  expect(created.state).toBe("running");
  const taken = await call({ action: "checkpoint", name: "src", label: "v1" });
  expect(taken.checkpoint).toMatchObject({ kind: "disk", label: "v1" });
  expect(taken.stallMs).toBeLessThan(2_000);
  const listed = await call({ action: "checkpoints", name: "src" });
  expect(listed.checkpoints.map((c: { label: string }) => c.label)).toEqual(["v1"]);
  expect(await page("src")).toBe("200 v1\n");
});

test("a memory checkpoint keeps the running processes; the instance runs on after its pause", async () => {
  await exec("src", "printf 'v2\\n' > /workspace/index.html");
  sleeper = (await exec("src", "sleep 100000 > /dev/null 2>&1 & echo $!")).trim();
  expect(sleeper).toMatch(/^\d+$/);
  const taken = await call({ action: "checkpoint", name: "src", label: "v2", memory: true });
  expect(taken.checkpoint).toMatchObject({ kind: "memory", label: "v2" });
  expect(taken.pauseMs).toBeGreaterThan(0);
  expect(await exec("src", `kill -0 ${sleeper} && echo alive`)).toBe("alive\n");
  expect(await page("src")).toBe("200 v2\n");
});

test("rewind to the disk checkpoint boots its disk (the later file and processes gone); to the memory one resumes them", async () => {
  await exec("src", "printf 'v3\\n' > /workspace/index.html");
  const toDisk = await call({ action: "rewind", name: "src", checkpoint: "v1" });
  expect(toDisk).toMatchObject({ state: "running", rewound: { label: "v1", kind: "disk" } });
  expect(toDisk.before).toMatchObject({ label: "before rewind to v1" });
  expect(await page("src")).toBe("200 v1\n");
  expect(await exec("src", `kill -0 ${sleeper} 2>/dev/null && echo alive || echo gone`)).toBe("gone\n");

  const toMemory = await call({ action: "rewind", name: "src", checkpoint: "v2" });
  expect(toMemory).toMatchObject({ state: "running", restore: { warm: true } });
  expect(await exec("src", `kill -0 ${sleeper} && echo alive`)).toBe("alive\n");
  expect(await page("src")).toBe("200 v2\n");

  // The state each rewind left is a checkpoint too: back to v3.
  await call({ action: "rewind", name: "src", checkpoint: toDisk.before.id });
  expect(await page("src")).toBe("200 v3\n");
});

test("fork of the running instance: two copies resume where it was, each its own guest, previews and disk", async () => {
  await exec("src", "printf 'forked\\n' > /workspace/index.html");
  const pid = (await exec("src", "sleep 100000 > /dev/null 2>&1 & echo $!")).trim();
  const forked = await call({ action: "fork", name: "src", count: 2 });
  expect(forked.forks).toEqual([
    { name: "src-1", kind: "memory" },
    { name: "src-2", kind: "memory" },
  ]);
  expect(forked.pauseMs).toBeGreaterThan(0);
  expect(forked.started.map((v: { state: string }) => v.state)).toEqual(["running", "running"]);
  const names = ["src", "src-1", "src-2"];
  for (const name of names) {
    expect(await page(name)).toBe("200 forked\n");
    expect(await exec(name, `kill -0 ${pid} && echo alive`)).toBe("alive\n");
  }
  const urls = await Promise.all(names.map(async (n) => (await call({ action: "inspect", name: n })).previews[0].url));
  expect(new Set(urls).size).toBe(3);
  const all = async (cmd: string) => Promise.all(names.map((name) => exec(name, cmd)));
  expect(new Set(await all("cat /etc/machine-id")).size).toBe(3);
  expect(await all("hostname")).toEqual(names.map((n) => `${n}\n`));
  expect(new Set(await all("head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'")).size).toBe(3);
  // Independent disks: a fork's write reaches neither the source nor the other fork.
  await exec("src-1", "printf 'mine\\n' > /workspace/index.html");
  expect(await page("src-1")).toBe("200 mine\n");
  expect(await page("src")).toBe("200 forked\n");
  expect(await page("src-2")).toBe("200 forked\n");
  // A fork of a fork works, and one of a kept checkpoint: src-1 as its memory checkpoint holds it
  // (its processes too), while src-1, which has moved on since, is not paused.
  const kept = await call({ action: "checkpoint", name: "src-1", label: "mine", memory: true });
  await exec("src-1", "printf 'later\\n' > /workspace/index.html");
  const again = await call({ action: "fork", name: "src-1", names: ["src-1-b"], from: "mine" });
  expect(again).toMatchObject({ forks: [{ name: "src-1-b", kind: "memory" }], from: { id: kept.checkpoint.id } });
  expect(again.pauseMs).toBeUndefined();
  expect(again.started[0].state).toBe("running");
  expect(await page("src-1-b")).toBe("200 mine\n");
  expect(await exec("src-1-b", `kill -0 ${pid} && echo alive`)).toBe("alive\n");
  expect(await exec("src-1-b", "hostname")).toBe("src-1-b\n");
  expect(await page("src-1")).toBe("200 later\n");
});

test("destroy leaves no checkpoint or layer files behind", async () => {
  const layout = new StateLayout(sandbox.home);
  for (const name of ["src-1-b", "src-2", "src-1", "src"]) await call({ action: "destroy", name, confirm: name });
  const left = await readdir(layout.kindDir("instances")).catch(() => []);
  expect(left).toEqual([]);
});
