// The dashboard's forks and checkpoints, no VM: the snapshot over the real action layer and state
// files groups each fork under its source (recursively) and lists each instance's kept
// checkpoints; diff stats are asked for only of what the page shows, only of running instances,
// through a POST the guard holds to the page's own Origin, and kept for a while.
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConfig } from "@pi-sandbox/config";
import { callAction, StateLayout } from "../src/client/index.js";
import { BranchReader, forkTrees, type InstanceBranches } from "../src/dashboard/branches.js";
import { DiffStats, diffRequest, type DiffScope } from "../src/dashboard/diff-stats.js";
import { startDashboardServer } from "../src/dashboard/server.js";
import { SnapshotPoller, type DashboardSnapshot } from "../src/dashboard/snapshot.js";
import type { DaemonLogger } from "../src/log.js";
import { writeRecord } from "../src/state/records.js";
import { runningView } from "./support/views.js";
import { dashboardSession } from "./support/dashboard-login.js";

const config = parseConfig("version: 1\n");
const log: DaemonLogger = { info: () => {}, warn: () => {}, child: () => log };
const checkpoint = {
  id: "0123456789ab",
  kind: "disk" as const,
  createdAt: "2026-01-01T00:00:00.000Z",
  bytes: 0,
  pinned: false,
};

describe("a snapshot over the state files", () => {
  let base: string;
  let layout: StateLayout;

  beforeAll(async () => {
    base = await mkdtemp(join(tmpdir(), "dash-branches-"));
    layout = new StateLayout(join(base, "state"));
    await layout.ensurePrivate();
    const instance = async (name: string, createdAt: string, forkedFrom?: { name: string; at: string }) => {
      await mkdir(layout.entryDir("instances", name), { recursive: true });
      await writeRecord(layout, { kind: "instances", name, createdAt, config, ...(forkedFrom ? { forkedFrom } : {}) });
    };
    // web ← web-1 ← web-1-1, web ← web-2 (forked after web-1), and one whose source was destroyed.
    await instance("web", "2026-01-01T00:00:00.000Z");
    await instance("web-2", "2026-01-01T02:00:00.000Z", { name: "web", at: "2026-01-01T02:00:00.000Z" });
    await instance("web-1", "2026-01-01T01:00:00.000Z", { name: "web", at: "2026-01-01T01:00:00.000Z" });
    await instance("web-1-1", "2026-01-01T03:00:00.000Z", { name: "web-1", at: "2026-01-01T03:00:00.000Z" });
    await instance("orphan", "2026-01-01T04:00:00.000Z", { name: "gone", at: "2026-01-01T04:00:00.000Z" });
    // Two kept checkpoints of web, as the vm package keeps them: a directory per id with its record.
    const kept = async (id: string, fields: Record<string, unknown>, layer?: Buffer) => {
      const dir = join(layout.diskDir("instances", "web"), "checkpoints", id);
      await mkdir(dir, { recursive: true });
      const layers = layer ? ["layer-1.qcow2"] : [];
      if (layer) await writeFile(join(dir, "layer-1.qcow2"), layer);
      const record = { version: 1, id, pinned: false, memory: false, generation: 1, layers, ...fields };
      await writeFile(join(dir, "checkpoint.json"), JSON.stringify(record));
    };
    await kept("0123456789ab", { label: "before \u001b[2Jrefactor", createdAt: "2026-01-01T00:30:00.000Z" });
    await kept(
      "ba9876543210",
      { memory: true, pinned: true, createdAt: "2026-01-01T00:40:00.000Z" },
      Buffer.alloc(64 * 1024, 1),
    );
  });
  afterAll(() => rm(base, { recursive: true, force: true }));

  test("each fork is grouped under its source, recursively, oldest first; each instance lists its kept checkpoints", async () => {
    const env = { ...process.env, PI_SANDBOX_HOME: layout.root };
    const poller = new SnapshotPoller((input) => callAction(input, { env, cwd: layout.root }), { idleMs: 60_000 });
    await poller.refresh();
    poller.close();
    const snapshot: DashboardSnapshot = poller.snapshot;
    expect(snapshot.error).toBeUndefined();
    expect(snapshot.diff).toBe(false);
    const { branches } = snapshot;
    expect(Object.keys(branches).sort()).toEqual(["orphan", "web", "web-1", "web-1-1", "web-2"]);
    expect(branches.web!.forkedFrom).toBeUndefined();
    expect(branches.web!.forks).toEqual([
      {
        name: "web-1",
        at: "2026-01-01T01:00:00.000Z",
        forks: [{ name: "web-1-1", at: "2026-01-01T03:00:00.000Z", forks: [] }],
      },
      { name: "web-2", at: "2026-01-01T02:00:00.000Z", forks: [] },
    ]);
    expect(branches["web-1"]).toMatchObject({
      forkedFrom: { name: "web", at: "2026-01-01T01:00:00.000Z" },
      forks: [{ name: "web-1-1", forks: [] }],
      checkpoints: [],
    });
    expect(branches["web-1-1"]!.forkedFrom).toEqual({ name: "web-1", at: "2026-01-01T03:00:00.000Z" });
    expect(branches.orphan!.forkedFrom).toEqual({ name: "gone", at: "2026-01-01T04:00:00.000Z", gone: true });
    // Oldest first, with kind, time, size and pin; the label a guest-side tool may have written arrives escaped.
    expect(branches.web!.checkpoints).toEqual([
      {
        id: "0123456789ab",
        label: "before \\x1b[2Jrefactor",
        kind: "disk",
        createdAt: "2026-01-01T00:30:00.000Z",
        bytes: 0,
        pinned: false,
      },
      {
        id: "ba9876543210",
        kind: "memory",
        createdAt: "2026-01-01T00:40:00.000Z",
        bytes: expect.any(Number) as number,
        pinned: true,
      },
    ]);
    expect(branches.web!.checkpoints[1]!.bytes).toBeGreaterThanOrEqual(64 * 1024);
    expect(branches.web!.checkpointBytes).toBe(branches.web!.checkpoints[1]!.bytes);
  });
});

test("a loop in the records (never written) is cut, and an instance is never its own fork", () => {
  const trees = forkTrees(
    new Map([
      ["a", { name: "b", at: "1" }],
      ["b", { name: "a", at: "2" }],
      ["c", { name: "c", at: "3" }],
    ]),
  );
  expect(trees.get("a")).toEqual([{ name: "b", at: "2", forks: [] }]);
  expect(trees.get("b")).toEqual([{ name: "a", at: "1", forks: [] }]);
  expect(trees.get("c")).toEqual([]);
});

test("an instance's checkpoint list is read again only when list's summary of it changed, and not at all without one", async () => {
  const calls: string[] = [];
  const reader = new BranchReader(async (input) => {
    calls.push(String(input.name));
    return { name: input.name, checkpoints: [checkpoint], bytes: 0 };
  });
  const kept = (count: number, id = "0123456789ab") => ({ count, bytes: 0, newest: { ...checkpoint, id } });
  const web = runningView({ name: "web", kept: kept(1) });
  const fork = runningView({ name: "web-1", forkedFrom: { name: "web", at: "t" } });
  const first = await reader.read([web, fork]);
  expect(first["web-1"]).toEqual({
    forkedFrom: { name: "web", at: "t" },
    forks: [],
    checkpoints: [],
    checkpointBytes: 0,
  });
  expect(first.web!.forks).toEqual([{ name: "web-1", at: "t", forks: [] }]);
  expect(first.web!.checkpoints).toEqual([checkpoint]);
  await reader.read([web, fork]);
  expect(calls).toEqual(["web"]);
  await reader.read([runningView({ name: "web", kept: kept(2, "ba9876543210") }), fork]);
  expect(calls).toEqual(["web", "web"]);
  // Its source destroyed: the fork says so, and is no one's fork in the page.
  expect((await reader.read([fork]))["web-1"]!.forkedFrom).toEqual({ name: "web", at: "t", gone: true });
});

const branchesOf = (fields: Partial<InstanceBranches>): InstanceBranches => ({
  forks: [],
  checkpoints: [],
  checkpointBytes: 0,
  ...fields,
});
const scope: DiffScope = {
  instances: [
    runningView({ name: "web" }),
    runningView({ name: "web-1" }),
    runningView({ name: "web-2", state: "suspended" }),
  ],
  branches: {
    web: branchesOf({ checkpoints: [checkpoint] }),
    "web-1": branchesOf({ forkedFrom: { name: "web", at: "t" } }),
    "web-2": branchesOf({ forkedFrom: { name: "web", at: "t" }, checkpoints: [checkpoint] }),
  },
};

test("the page may ask only for a shown fork's diff against its source or a shown checkpoint's, of running instances", () => {
  expect(diffRequest({ name: "web-1", against: "web" }, scope)).toEqual({ name: "web-1", against: "web" });
  expect(diffRequest({ name: "web", since: "0123456789ab" }, scope)).toEqual({ name: "web", since: "0123456789ab" });
  const code = (body: unknown) => {
    try {
      diffRequest(body, scope);
      return "accepted";
    } catch (error) {
      return (error as { code: string }).code;
    }
  };
  // Not the fork's source, not a fork, an unknown checkpoint, both bases, a name the page does not show.
  expect(code({ name: "web-1", against: "web-2" })).toBe("CONTROLLER_BAD_INPUT");
  expect(code({ name: "web", against: "web-1" })).toBe("CONTROLLER_BAD_INPUT");
  expect(code({ name: "web", since: "ffffffffffff" })).toBe("CONTROLLER_BAD_INPUT");
  expect(code({ name: "web", since: "0123456789ab", against: "web-1" })).toBe("CONTROLLER_BAD_INPUT");
  expect(code({ name: "elsewhere", since: "0123456789ab" })).toBe("CONTROLLER_BAD_INPUT");
  expect(code({ name: "web", path: "/etc" })).toBe("CONTROLLER_BAD_INPUT");
  // A suspended instance is never woken for a diff stat, as the fork or as its checkpoint's owner.
  expect(code({ name: "web-2", against: "web" })).toBe("CONTROLLER_NOT_RUNNING");
  expect(code({ name: "web-2", since: "0123456789ab" })).toBe("CONTROLLER_NOT_RUNNING");
});

test("a diff stat is kept for its time to live, joined while it runs, never kept when it failed, and its paths go out escaped", async () => {
  const clock = { ms: 0 };
  const asked: Record<string, unknown>[] = [];
  let fail = false;
  const stats = new DiffStats(
    async (input) => {
      asked.push(input);
      await new Promise((resolve) => setTimeout(resolve, 20));
      if (fail) throw new Error("guest gone");
      return {
        stat: { files: 2, added: 3, deleted: 1 },
        files: [
          { path: "evil\u001b]52;c;aGk=\u0007.txt", status: "added", added: 3, deleted: 0 },
          { path: "logo.png", status: "modified", added: 0, deleted: 1, binary: true },
        ],
      };
    },
    { ttlMs: 15_000, now: () => clock.ms },
  );
  const [a, b] = await Promise.all([
    stats.get({ name: "web-1", against: "web" }),
    stats.get({ name: "web-1", against: "web" }),
  ]);
  expect(a).toBe(b);
  expect(asked).toEqual([{ action: "diff", name: "web-1", against: "web", stat: true }]);
  expect(a).toMatchObject({ name: "web-1", against: "web", files: 2, added: 3, deleted: 1 });
  expect(a.changed[0]!.path).toBe("evil\\x1b]52;c;aGk=\\x07.txt");
  expect(a.changed[1]).toEqual({ path: "logo.png", status: "modified", added: 0, deleted: 1, binary: true });
  clock.ms = 14_000;
  await stats.get({ name: "web-1", against: "web" });
  expect(asked).toHaveLength(1);
  clock.ms = 15_000;
  await stats.get({ name: "web-1", against: "web" });
  expect(asked).toHaveLength(2);
  fail = true;
  await expect(stats.get({ name: "web", since: "0123456789ab" })).rejects.toThrow("guest gone");
  fail = false;
  await stats.get({ name: "web", since: "0123456789ab" });
  expect(asked.slice(2)).toEqual([
    { action: "diff", name: "web", since: "0123456789ab", stat: true },
    { action: "diff", name: "web", since: "0123456789ab", stat: true },
  ]);
});

test("at most two diff stats run at once; the others wait their turn", async () => {
  let running = 0;
  let most = 0;
  const stats = new DiffStats(async () => {
    most = Math.max(most, ++running);
    await new Promise((resolve) => setTimeout(resolve, 20));
    running--;
    return { stat: { files: 0, added: 0, deleted: 0 }, files: [] };
  });
  const ids = ["000000000001", "000000000002", "000000000003", "000000000004", "000000000005"];
  const answers = await Promise.all(ids.map((since) => stats.get({ name: "web", since })));
  expect(answers.map((a) => a.since)).toEqual(ids);
  expect(most).toBe(2);
});

describe("the server's diff stats", () => {
  const key = "ab".repeat(32);
  const calls: Record<string, unknown>[] = [];
  const call = async (input: Record<string, unknown>): Promise<unknown> => {
    calls.push(input);
    if (input.action === "list") {
      return input.kind === "templates"
        ? { templates: [] }
        : {
            instances: [
              runningView({ name: "web", kept: { count: 1, bytes: 0, newest: checkpoint } }),
              runningView({ name: "web-1", forkedFrom: { name: "web", at: "t" } }),
            ],
          };
    }
    if (input.action === "checkpoints") {
      return { name: input.name, checkpoints: input.name === "web" ? [checkpoint] : [], bytes: 0 };
    }
    if (input.action === "diff") return { stat: { files: 1, added: 2, deleted: 0 }, files: [] };
    throw new Error(`unexpected ${String(input.action)}`);
  };

  async function serve(diff: boolean) {
    const server = await startDashboardServer({ call, key, log, pollMs: { active: 50, idle: 50 }, diff });
    const origin = `http://127.0.0.1:${server.port}`;
    const cookie = await dashboardSession(origin, key);
    const post = (body: unknown, headers: Record<string, string> = { origin }) =>
      fetch(`${origin}/api/diff`, {
        method: "POST",
        headers: { cookie, "content-type": "application/json", ...headers },
        body: JSON.stringify(body),
      });
    // Until the first poll has read the branches, nothing is shown, so nothing may be asked.
    const deadline = Date.now() + 5_000;
    for (;;) {
      const state = (await (await fetch(`${origin}/api/state`, { headers: { cookie } })).json()) as DashboardSnapshot;
      if (state.branches?.["web-1"]?.forkedFrom) return { server, origin, cookie, post, state };
      if (Date.now() > deadline) throw new Error("the snapshot never showed web-1's source");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  test("the snapshot says whether diff stats are offered; a shown pair's stat comes back; the poll never asks for one", async () => {
    const { server, post, state } = await serve(true);
    try {
      expect(state.diff).toBe(true);
      expect(state.branches.web!.forks).toEqual([{ name: "web-1", at: "t", forks: [] }]);
      calls.length = 0;
      const fork = await post({ name: "web-1", against: "web" });
      expect(fork.status).toBe(200);
      expect(((await fork.json()) as { stat: unknown }).stat).toMatchObject({ files: 1, added: 2, deleted: 0 });
      expect((await post({ name: "web", since: "0123456789ab" })).status).toBe(200);
      const refused = await post({ name: "web", against: "web-1" });
      expect(refused.status).toBe(409);
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("CONTROLLER_BAD_INPUT");
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(calls.filter((c) => c.action === "diff")).toEqual([
        { action: "diff", name: "web-1", against: "web", stat: true },
        { action: "diff", name: "web", since: "0123456789ab", stat: true },
      ]);
    } finally {
      await server.close();
    }
  });

  test("another origin, no Origin at all, or a GET cannot make a guest run a diff", async () => {
    const { server, origin, cookie, post } = await serve(true);
    try {
      calls.length = 0;
      expect((await post({ name: "web-1", against: "web" }, { origin: "http://127.0.0.2:4000" })).status).toBe(403);
      expect((await post({ name: "web-1", against: "web" }, {})).status).toBe(403);
      expect((await fetch(`${origin}/api/diff?name=web-1&against=web`, { headers: { cookie } })).status).toBe(404);
      expect(calls.filter((c) => c.action === "diff")).toEqual([]);
    } finally {
      await server.close();
    }
  });

  test("without a diff action, the page is told so and a diff stat is refused", async () => {
    const { server, post, state } = await serve(false);
    try {
      expect(state.diff).toBe(false);
      const refused = await post({ name: "web-1", against: "web" });
      expect(refused.status).toBe(409);
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("CONTROLLER_UNKNOWN_ACTION");
    } finally {
      await server.close();
    }
  });
});
