import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ControllerError } from "@pi-sandbox/controller/client";
import { runReviewSetup, type ReviewSetupOptions, type StepEvent } from "../src/refresh.js";
import { FakeGuest } from "./fake-guest.js";
import { makeFixtureRepo } from "./fixture.js";

let repo: string;
let lockDir: string;
beforeAll(async () => {
  repo = await makeFixtureRepo();
  lockDir = await mkdtemp(join(tmpdir(), "review-locks-"));
});
afterAll(async () => {
  await rm(repo, { recursive: true, force: true });
  await rm(lockDir, { recursive: true, force: true });
});

const running = async () => ({ state: "running" });

function options(guest: FakeGuest, extra: Partial<ReviewSetupOptions> = {}): ReviewSetupOptions {
  return {
    name: "review",
    repo,
    guest,
    callAction: running,
    lockDir,
    now: () => Date.UTC(2026, 0, 2, 3, 4, 5),
    ...extra,
  };
}

test("a refresh uploads the archive, verifies, unpacks, installs, builds, then switches atomically", async () => {
  const guest = new FakeGuest();
  const events: StepEvent[] = [];
  const result = await runReviewSetup(options(guest, { onProgress: (e) => events.push(e) }));
  expect(result).toMatchObject({
    instance: "review",
    mode: "offline-snapshot",
    vcs: "git",
    files: 7,
    candidateId: expect.stringMatching(/^20260102-030405-[0-9a-f]{8}$/),
    currentPath: "/workspace/.review/current",
    previousId: undefined,
    agentDir: "/workspace/.review/agent",
    live: undefined,
    launchCommand:
      "cd /workspace/.review/current && PI_CODING_AGENT_DIR=/workspace/.review/agent node_modules/.bin/pi -e ./packages/pi-extension",
  });
  expect([...guest.uploads.keys()]).toEqual([
    expect.stringMatching(/^\/workspace\/\.review\/incoming\/[^/]+\/snapshot\.tar\.gz$/),
  ]);
  expect(guest.current).toBe(`candidates/${result.candidateId}`);
  const done = events.filter((e) => e.status === "done").map((e) => e.step);
  expect(done).toEqual(["instance", "snapshot", "transfer", "verify", "unpack", "install", "build", "switch", "agent"]);
  const order = ["tar -xzf", "npm ci --no-audit --no-fund", "npm run build", "ln -sfn"].map((n) =>
    guest.commands.findIndex((c) => c.includes(n)),
  );
  expect(order.every((i, k) => i >= 0 && (k === 0 || i > order[k - 1]!))).toBe(true);
  expect(guest.commands.find((c) => c.startsWith("ln -sfn"))).toMatch(/ && mv -T \S+ \/workspace\/\.review\/current$/);
  expect(result.notes).toEqual(["Herdr not found in the guest: its Pi integration was skipped (optional)."]);

  const again = await runReviewSetup(options(guest, { now: () => Date.UTC(2026, 0, 2, 3, 9, 0) }));
  expect(again.previousId).toBe(result.candidateId);
});

test("a checksum mismatch stops before unpacking", async () => {
  const guest = new FakeGuest({ corrupt: true });
  await expect(runReviewSetup(options(guest))).rejects.toMatchObject({
    code: "REVIEW_SETUP_CHECKSUM_MISMATCH",
    hint: expect.stringContaining("unchanged"),
  });
  expect(guest.commands.some((c) => c.includes("tar -xzf") || c.startsWith("ln -sfn"))).toBe(false);
});

test("a failed install names the step and its log, cleans the candidate, and keeps the current one", async () => {
  const guest = new FakeGuest({ failing: { "npm ci": 1 } });
  guest.current = "candidates/older";
  const error = await runReviewSetup(options(guest)).catch((e: unknown) => e);
  expect(error).toMatchObject({
    code: "REVIEW_SETUP_STEP_FAILED",
    details: {
      step: "install",
      logPath: expect.stringMatching(/^\/workspace\/\.review\/logs\/[^/]+\/install\.log$/),
      exitCode: 1,
      previousId: "older",
    },
  });
  expect((error as Error).message).toMatch(
    /^install failed \(exit 1\); log: \S+install\.log; candidate older stays current$/,
  );
  expect(guest.current).toBe("candidates/older");
  expect(guest.commands.some((c) => c.startsWith("ln -sfn"))).toBe(false);
  expect(guest.commands.some((c) => c.includes("npm run build"))).toBe(false);
  expect(guest.commands.at(-1)).toMatch(
    /^rm -rf \/workspace\/\.review\/candidates\/\S+ \/workspace\/\.review\/incoming\//,
  );
});

test("a guest without node or npm is refused before any transfer, naming the tools and the fix", async () => {
  const guest = new FakeGuest({ missing: ["node", "npm"] });
  await expect(runReviewSetup(options(guest))).rejects.toMatchObject({
    code: "REVIEW_SETUP_GUEST_TOOL_MISSING",
    message: "the guest of review lacks node, npm on PATH (the refresh needs tar, node, npm)",
    hint: expect.stringContaining("npm run -s test-image"),
    details: { missing: ["node", "npm"] },
  });
  expect(guest.files.size).toBe(0);
});

test("a guest with a Node older than 24 is refused with the version it has", async () => {
  const guest = new FakeGuest({ nodeVersion: "v20.19.2" });
  await expect(runReviewSetup(options(guest))).rejects.toMatchObject({
    code: "REVIEW_SETUP_GUEST_TOOL_MISSING",
    message: "the guest of review has node v20.19.2; the review candidate needs Node 24 or newer",
    details: { missing: ["node"], nodeVersion: "v20.19.2" },
  });
  expect(guest.files.size).toBe(0);
});

test("a second refresh of the same instance fails fast naming the first; the first completes", async () => {
  let unblock!: () => void;
  let started!: () => void;
  const installing = new Promise<void>((resolve) => (started = resolve));
  const guest = new FakeGuest({
    blockOn: { needle: "npm ci", until: new Promise<void>((resolve) => (unblock = resolve)), started },
  });
  const first = runReviewSetup(options(guest, { name: "busy" }));
  await installing;
  const t0 = Date.now();
  const second = await runReviewSetup(options(new FakeGuest(), { name: "busy" })).catch((e: unknown) => e);
  expect(Date.now() - t0).toBeLessThan(5_000);
  expect(second).toMatchObject({
    code: "REVIEW_SETUP_BUSY",
    message: expect.stringMatching(
      new RegExp(
        `^instance busy is already being refreshed by pid ${process.pid} on \\S+, started \\S+, snapshotting ${repo}$`,
      ),
    ),
    hint: expect.stringContaining(join(lockDir, "busy.lock")),
    details: { lockPath: join(lockDir, "busy.lock"), holder: { pid: process.pid, repo } },
  });
  // Another instance is not held up by it.
  await expect(runReviewSetup(options(new FakeGuest(), { name: "other" }))).resolves.toMatchObject({
    instance: "other",
  });
  unblock();
  await expect(first).resolves.toMatchObject({ instance: "busy" });
  // Released: the next refresh of the instance runs.
  await expect(runReviewSetup(options(new FakeGuest(), { name: "busy" }))).resolves.toMatchObject({ instance: "busy" });
});

test("a failed refresh releases the lock too", async () => {
  await expect(
    runReviewSetup(options(new FakeGuest({ failing: { "npm run build": 2 } }), { name: "fails" })),
  ).rejects.toMatchObject({ code: "REVIEW_SETUP_STEP_FAILED" });
  await expect(runReviewSetup(options(new FakeGuest(), { name: "fails" }))).resolves.toMatchObject({
    instance: "fails",
  });
});

test.each([
  ["missing", undefined, {}, "REVIEW_SETUP_INSTANCE_MISSING", "--config"],
  ["stopped", { state: "stopped" }, {}, "REVIEW_SETUP_INSTANCE_NOT_RUNNING", "npx pi-sandbox start review"],
  [
    "existing with --config",
    { state: "running" },
    { config: "x.yaml" },
    "REVIEW_SETUP_INSTANCE_EXISTS",
    "Drop --config",
  ],
])("an instance that is %s is refused with the fix", async (_label, view, extra, code, hint) => {
  const guest = new FakeGuest();
  const call = async () => {
    if (!view) throw new ControllerError("CONTROLLER_NOT_FOUND", "no such instance");
    return view;
  };
  await expect(runReviewSetup(options(guest, { callAction: call, ...extra }))).rejects.toMatchObject({
    code,
    hint: expect.stringContaining(hint),
  });
  expect(guest.commands).toEqual([]);
});

test("--config creates the instance first and relays its progress", async () => {
  const calls: Record<string, unknown>[] = [];
  const call = async (action: unknown, opts?: { onProgress?: (e: { stage: string; message: string }) => void }) => {
    const a = action as Record<string, unknown>;
    calls.push(a);
    if (a.action === "inspect") throw new ControllerError("CONTROLLER_NOT_FOUND", "no such instance");
    opts?.onProgress?.({ stage: "boot", message: "booting" });
    return { state: "running" };
  };
  const events: StepEvent[] = [];
  await runReviewSetup(
    options(new FakeGuest(), { callAction: call, config: "x.yaml", onProgress: (e) => events.push(e) }),
  );
  expect(calls).toEqual([
    { action: "inspect", name: "review" },
    { action: "create", name: "review", config: "x.yaml" },
  ]);
  expect(events).toContainEqual({ step: "instance", status: "info", message: "boot: booting" });
});

describe("live mode", () => {
  let hostAgent: string;
  beforeAll(async () => {
    hostAgent = await mkdtemp(join(tmpdir(), "host-agent-"));
  });
  afterAll(async () => {
    await rm(hostAgent, { recursive: true, force: true });
  });
  const liveLine = JSON.stringify({
    type: "message_end",
    message: {
      role: "assistant",
      stopReason: "stop",
      content: [{ type: "text", text: "ready" }],
      usage: { input: 5, output: 1, totalTokens: 6 },
    },
  });

  test("stores only the access token in the guest agent dir and requires a generated response", async () => {
    const expires = Date.UTC(2026, 0, 2, 5, 0, 0);
    await mkdir(hostAgent, { recursive: true });
    await writeFile(
      join(hostAgent, "auth.json"),
      JSON.stringify({ codex: { type: "oauth", access: "acc-1", refresh: "ref-1", expires, accountId: "a1" } }),
    );
    const guest = new FakeGuest({ liveOutput: `${liveLine}\n` });
    guest.files.set("/workspace/.review/agent/auth.json", JSON.stringify({ other: { type: "api_key", key: "k" } }));
    const result = await runReviewSetup(
      options(guest, {
        liveModel: { provider: "codex", model: "m-1" },
        hostEnv: { PI_CODING_AGENT_DIR: hostAgent, PATH: process.env.PATH },
      }),
    );
    expect(result.mode).toBe("live-ready");
    expect(result.live).toMatchObject({
      model: "codex/m-1",
      response: "ready",
      usage: { input: 5, output: 1, totalTokens: 6 },
      expiresAt: expires,
    });
    expect(JSON.parse(guest.files.get("/workspace/.review/agent/auth.json")!)).toEqual({
      other: { type: "api_key", key: "k" },
      codex: { type: "oauth", access: "acc-1", refresh: "", expires, accountId: "a1" },
    });
    expect([...guest.uploads.values()].some((bytes) => bytes.includes("acc-1"))).toBe(false);
    expect(guest.commands.join("\n")).not.toContain("acc-1");
    expect(result.launchCommand).toBe(
      "cd /workspace/.review/current && PI_CODING_AGENT_DIR=/workspace/.review/agent node_modules/.bin/pi -e ./packages/pi-extension --model codex/m-1",
    );
  });

  test("no generated response: LIVE_CHECK_FAILED, and the result is never live-ready", async () => {
    const guest = new FakeGuest({
      liveOutput: '{"type":"message_end","message":{"role":"assistant","stopReason":"error","content":[]}}\n',
    });
    await expect(
      runReviewSetup(
        options(guest, {
          liveModel: { provider: "codex", model: "m-1" },
          hostEnv: { PI_CODING_AGENT_DIR: hostAgent, PATH: process.env.PATH },
        }),
      ),
    ).rejects.toMatchObject({
      code: "REVIEW_SETUP_LIVE_CHECK_FAILED",
      message: expect.stringContaining("NOT live-ready"),
    });
  });

  test("a missing host login fails before any guest work", async () => {
    const guest = new FakeGuest();
    await expect(
      runReviewSetup(
        options(guest, { liveModel: { provider: "nope", model: "m" }, hostEnv: { PI_CODING_AGENT_DIR: hostAgent } }),
      ),
    ).rejects.toMatchObject({ code: "REVIEW_SETUP_LOGIN_MISSING" });
    expect(guest.commands).toEqual([]);
  });
});
