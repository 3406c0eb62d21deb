// The whole refresh against a scripted guest: upload, verify, unpack, install, build and switch,
// each failure named with its step and log and the current tree kept; live mode's host-kept tokens.
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "@pi-sandbox/config";
import { ControllerError } from "@pi-sandbox/controller/client";
import { unsetValue } from "../src/host-secrets.js";
import { GUEST_REFRESH_TOKEN } from "../src/live.js";
import { acquireRefreshLock, refreshLockPath } from "../src/lock.js";
import { runReviewSetup, type ReviewSetupOptions, type StepEvent } from "../src/refresh.js";
import { FakeGuest } from "./support/fake-guest.js";
import { makeFixtureRepo } from "./support/fixture.js";

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
    files: 10,
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
  const order = ["tar -xzf", "npm ci --no-audit --no-fund --prefer-offline", "npm run build", "ln -sfn"].map((n) =>
    guest.commands.findIndex((c) => c.includes(n)),
  );
  expect(order.every((i, k) => i >= 0 && (k === 0 || i > order[k - 1]!))).toBe(true);
  expect(guest.commands.find((c) => c.startsWith("ln -sfn"))).toMatch(/ && mv -T \S+ \/workspace\/\.review\/current$/);
  expect(result.notes).toEqual(["Herdr not found in the guest: its Pi integration was skipped (optional)."]);

  const again = await runReviewSetup(options(guest, { now: () => Date.UTC(2026, 0, 2, 3, 9, 0) }));
  expect(again.previousId).toBe(result.candidateId);
});

test("Herdr in the guest: its Pi integration is installed into the agent directory, a failure quoted with the command", async () => {
  const installed = await runReviewSetup(options(new FakeGuest({ herdr: "installed" })));
  expect(installed.notes).toEqual(["Herdr found: its Pi integration is installed in the agent directory."]);
  const guest = new FakeGuest({ herdr: { failOutput: "error: no socket\nhint: start herdr\n" } });
  const failed = await runReviewSetup(options(guest));
  expect(failed.mode).toBe("offline-snapshot"); // Herdr is optional: the refresh itself succeeded
  expect(failed.notes).toEqual([
    expect.stringMatching(
      /^Herdr found but `PI_CODING_AGENT_DIR=\/workspace\/\.review\/agent herdr integration install pi` failed \(exit 1; log: \/workspace\/\.review\/logs\/\S+\/agent\.log\): error: no socket \| hint: start herdr$/,
    ),
  ]);
  expect(guest.commands.find((c) => c.includes("command -v herdr"))).toContain(
    "PI_CODING_AGENT_DIR=/workspace/.review/agent herdr integration install pi",
  );
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

  const PLACEHOLDER = "sk-ant-oat01-PI_SANDBOX_SECRET_0123456789abcdef0123456789abcdef01234567";
  const declared = [
    { name: "ANTHROPIC_API_KEY", hosts: ["api.anthropic.com"] },
    { name: "ANTHROPIC_OAUTH_TOKEN", hosts: ["api.anthropic.com"] },
  ];
  /** A controller whose instance declares `secrets`; records every call. */
  const controller = (secrets: unknown[] | undefined, calls: unknown[]) => async (input: unknown) => {
    calls.push(input);
    return (input as { action: string }).action === "secrets" ? { secrets } : { state: "running", secrets };
  };
  const login = async (entry: Record<string, unknown>) => {
    await mkdir(hostAgent, { recursive: true });
    await writeFile(join(hostAgent, "auth.json"), JSON.stringify({ anthropic: entry }));
  };

  test("keeps the access token on the host: its secret file, then the secrets action; the guest gets the placeholder", async () => {
    const expires = Date.UTC(2026, 0, 2, 5, 0, 0);
    await login({ type: "oauth", access: "sk-ant-oat01-acc-1", refresh: "ref-1", expires });
    const guest = new FakeGuest({ liveOutput: `${liveLine}\n`, env: { ANTHROPIC_OAUTH_TOKEN: PLACEHOLDER } });
    guest.files.set("/workspace/.review/agent/auth.json", JSON.stringify({ other: { type: "api_key", key: "k" } }));
    const calls: unknown[] = [];
    const events: StepEvent[] = [];
    const result = await runReviewSetup(
      options(guest, {
        liveModel: { provider: "anthropic", model: "m-1" },
        hostEnv: { PI_CODING_AGENT_DIR: hostAgent, PATH: process.env.PATH },
        callAction: controller(declared, calls),
        onProgress: (e) => events.push(e),
      }),
    );
    expect(result.mode).toBe("live-ready");
    expect(result.live).toMatchObject({ model: "anthropic/m-1", response: "ready", expiresAt: expires });
    // The host's secret files: the token in its own, the unset line in the provider's other one.
    const secrets = join(lockDir, "secrets", "review");
    expect((await stat(secrets)).mode & 0o777).toBe(0o700);
    expect((await stat(join(secrets, "ANTHROPIC_OAUTH_TOKEN"))).mode & 0o777).toBe(0o600);
    expect(await readFile(join(secrets, "ANTHROPIC_OAUTH_TOKEN"), "utf8")).toBe("sk-ant-oat01-acc-1\n");
    expect(await readFile(join(secrets, "ANTHROPIC_API_KEY"), "utf8")).toBe(`${unsetValue("ANTHROPIC_API_KEY")}\n`);
    expect(calls).toContainEqual({ action: "secrets", name: "review" });
    // The guest's auth.json: an API-key entry holding the placeholder, which Pi never refreshes.
    expect(JSON.parse(guest.files.get("/workspace/.review/agent/auth.json")!)).toEqual({
      other: { type: "api_key", key: "k" },
      anthropic: { type: "api_key", key: PLACEHOLDER },
    });
    const seen = [...guest.commands, ...guest.files.values(), JSON.stringify(events), JSON.stringify(result)].join(
      "\n",
    );
    expect(seen).not.toContain("acc-1");
    expect(seen).not.toContain("ref-1");
    expect([...guest.uploads.values()].some((bytes) => bytes.includes("acc-1"))).toBe(false);
    expect(result.launchCommand).toBe(
      "cd /workspace/.review/current && PI_CODING_AGENT_DIR=/workspace/.review/agent node_modules/.bin/pi -e ./packages/pi-extension --model anthropic/m-1",
    );
  });

  test("a ChatGPT login: the token and its shaped placeholder stay in host files; the guest's auth.json gets the placeholder", async () => {
    const exp = Math.floor(Date.UTC(2026, 0, 2, 5, 0, 0) / 1000);
    const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
    const access = [
      part({ alg: "RS256", typ: "JWT" }),
      part({ exp, "https://api.openai.com/auth": { chatgpt_account_id: "acct-7" }, email: "me@example.com" }),
      "real-signature-acc-9",
    ].join(".");
    await writeFile(
      join(hostAgent, "auth.json"),
      JSON.stringify({ "openai-codex": { type: "oauth", access, refresh: "ref-9", expires: exp * 1000 } }),
    );
    const guest = new FakeGuest({ liveOutput: `${liveLine}\n` });
    const calls: unknown[] = [];
    const result = await runReviewSetup(
      options(guest, {
        liveModel: { provider: "openai-codex", model: "gpt-6-sol" },
        hostEnv: { PI_CODING_AGENT_DIR: hostAgent, PATH: process.env.PATH },
        callAction: controller([{ name: "OPENAI_CODEX_ACCESS_TOKEN", hosts: ["chatgpt.com"] }], calls),
      }),
    );
    expect(result.mode).toBe("live-ready");
    const secrets = join(lockDir, "secrets", "review");
    expect(await readFile(join(secrets, "OPENAI_CODEX_ACCESS_TOKEN"), "utf8")).toBe(`${access}\n`);
    const placeholder = (await readFile(join(secrets, "OPENAI_CODEX_ACCESS_TOKEN.placeholder"), "utf8")).trim();
    expect(calls).toContainEqual({ action: "secrets", name: "review" });
    const auth = JSON.parse(guest.files.get("/workspace/.review/agent/auth.json")!);
    expect(auth).toEqual({
      "openai-codex": { type: "oauth", access: placeholder, refresh: GUEST_REFRESH_TOKEN, expires: exp * 1000 },
    });
    const claims = JSON.parse(Buffer.from(placeholder.split(".")[1]!, "base64url").toString());
    expect(claims).toMatchObject({ exp, "https://api.openai.com/auth": { chatgpt_account_id: "acct-7" } });
    const seen = [...guest.commands, ...guest.files.values(), JSON.stringify(result)].join("\n");
    for (const secret of ["real-signature-acc-9", "ref-9", "me@example.com", access])
      expect(seen).not.toContain(secret);
  });

  test("a Copilot login: the guest gets an OAuth entry with the shaped token; an endpoint live mode does not know is refused first", async () => {
    const exp = Math.floor(Date.UTC(2026, 0, 2, 5, 0, 0) / 1000);
    const copilot = (endpoint: string) =>
      writeFile(
        join(hostAgent, "auth.json"),
        JSON.stringify({
          "github-copilot": {
            type: "oauth",
            access: `tid=t-1;exp=${exp};proxy-ep=${endpoint};8kp=1:${"cd".repeat(32)}`,
            refresh: "gho-refresh-1",
            expires: exp * 1000,
          },
        }),
      );
    const hosts = [
      "api.individual.githubcopilot.com",
      "api.business.githubcopilot.com",
      "api.enterprise.githubcopilot.com",
    ];
    const run = (guest: FakeGuest) =>
      runReviewSetup(
        options(guest, {
          liveModel: { provider: "github-copilot", model: "gpt-6-sol" },
          hostEnv: { PI_CODING_AGENT_DIR: hostAgent, PATH: process.env.PATH },
          callAction: controller([{ name: "GITHUB_COPILOT_ACCESS_TOKEN", hosts }], []),
        }),
      );
    await copilot("proxy.individual.githubcopilot.com");
    const guest = new FakeGuest({ liveOutput: `${liveLine}\n` });
    expect((await run(guest)).mode).toBe("live-ready");
    const entry = JSON.parse(guest.files.get("/workspace/.review/agent/auth.json")!)["github-copilot"];
    expect(entry).toEqual({
      type: "oauth",
      access: expect.stringMatching(
        /^tid=[0-9a-f]{32};exp=\d+;proxy-ep=proxy\.individual\.githubcopilot\.com;8kp=1:[0-9a-f]{64}$/,
      ),
      refresh: GUEST_REFRESH_TOKEN,
      expires: exp * 1000,
    });
    await copilot("copilot-proxy.ghe.example.com");
    const refused = new FakeGuest({ liveOutput: `${liveLine}\n` });
    await expect(run(refused)).rejects.toMatchObject({
      code: "REVIEW_SETUP_PROVIDER_UNSUPPORTED",
      message: expect.stringContaining("points Pi at copilot-proxy.ghe.example.com"),
    });
    expect(refused.commands).toEqual([]); // before any guest work
  });

  /**
   * A controller whose instance was made without the secret: `secrets-add` records it, `suspend`
   * and `start` restart the VM (then `inspect` and `start` show it), `secrets` reloads.
   */
  const plainInstance = (calls: unknown[], restore: unknown = { warm: true, restoreMs: 900 }) => {
    let declared: { name: string; hosts: string[] }[] = [];
    let restarted = false;
    return async (input: unknown) => {
      calls.push(input);
      const call = input as { action: string; secrets?: Record<string, { hosts: string[] }> };
      if (call.action === "secrets-add") {
        const added = Object.keys(call.secrets!);
        declared = [...declared, ...added.map((name) => ({ name, hosts: call.secrets![name]!.hosts }))];
        return { added, unchanged: [], allowedHostsAdded: ["api.anthropic.com"], restartNeeded: true };
      }
      if (call.action === "secrets" && !restarted) {
        throw new ControllerError("VM_SECRET_INVALID", "no secret named ANTHROPIC_API_KEY was given to this VM");
      }
      if (call.action === "suspend") return { state: "suspended" };
      if (call.action === "start") restarted = true;
      return { state: "running", secrets: declared, ...(call.action === "start" ? { restore } : {}) };
    };
  };

  test("an instance made without --config gets the provider's secrets; without --restart or a yes it is not restarted", async () => {
    await login({ type: "api_key", key: "sk-ant-api-KEY" });
    const calls: unknown[] = [];
    const guest = new FakeGuest({ liveOutput: `${liveLine}\n` });
    const questions: string[] = [];
    const run = (extra: Partial<ReviewSetupOptions>) =>
      runReviewSetup(
        options(guest, {
          liveModel: { provider: "anthropic", model: "m" },
          hostEnv: { PI_CODING_AGENT_DIR: hostAgent },
          callAction: plainInstance(calls),
          ...extra,
        }),
      );
    await expect(run({})).rejects.toMatchObject({
      code: "REVIEW_SETUP_RESTART_NEEDED",
      message: expect.stringMatching(/declares ANTHROPIC_API_KEY now, which its VM, booted before, does not have/),
      hint: expect.stringMatching(/--restart .*npx pi-sandbox suspend review && npx pi-sandbox start review/),
    });
    const declared = calls.find((c) => (c as { action: string }).action === "secrets-add") as {
      secrets: Record<string, { from: string; hosts: string[] }>;
    };
    expect(Object.keys(declared.secrets)).toEqual(["ANTHROPIC_API_KEY", "ANTHROPIC_OAUTH_TOKEN"]);
    expect(declared.secrets.ANTHROPIC_API_KEY).toEqual({
      from: `file:${join(lockDir, "secrets", "review", "ANTHROPIC_API_KEY")}`,
      hosts: ["api.anthropic.com"],
    });
    const no = async (question: string) => {
      questions.push(question);
      return false;
    };
    await expect(run({ confirm: no })).rejects.toMatchObject({ code: "REVIEW_SETUP_RESTART_NEEDED" });
    expect(questions).toEqual([expect.stringMatching(/Restart it now as a suspend and resume .*\[y\/N\] $/)]);
    expect(calls.map((c) => (c as { action: string }).action)).not.toContain("suspend");
    expect(guest.commands).toEqual([]); // nothing in the guest before the secret is usable
  });

  test("--restart waits for no one: while another refresh holds the lock, the instance is not suspended", async () => {
    await login({ type: "api_key", key: "sk-ant-api-KEY" });
    const release = await acquireRefreshLock(refreshLockPath(lockDir, "review"), {
      instance: "review",
      repo,
      now: Date.now(),
    });
    try {
      const calls: unknown[] = [];
      await expect(
        runReviewSetup(
          options(new FakeGuest(), {
            liveModel: { provider: "anthropic", model: "m" },
            hostEnv: { PI_CODING_AGENT_DIR: hostAgent },
            callAction: plainInstance(calls),
            restart: true,
          }),
        ),
      ).rejects.toMatchObject({ code: "REVIEW_SETUP_BUSY" });
      expect(calls.map((c) => (c as { action: string }).action)).toEqual(["inspect"]);
    } finally {
      await release();
    }
  });

  test("--restart (or a yes) suspends and resumes the instance, then the live refresh goes on", async () => {
    await login({ type: "api_key", key: "sk-ant-api-KEY" });
    for (const extra of [{ restart: true }, { confirm: async () => true }] as Partial<ReviewSetupOptions>[]) {
      const calls: unknown[] = [];
      const guest = new FakeGuest({ liveOutput: `${liveLine}\n`, env: { ANTHROPIC_API_KEY: "PI_SANDBOX_SECRET_k" } });
      const result = await runReviewSetup(
        options(guest, {
          liveModel: { provider: "anthropic", model: "m" },
          hostEnv: { PI_CODING_AGENT_DIR: hostAgent },
          callAction: plainInstance(calls),
          ...extra,
        }),
      );
      expect(result.mode).toBe("live-ready");
      expect(result.notes[0]).toBe("review was suspended and resumed for the new secrets: its processes kept running.");
      expect(calls.map((c) => (c as { action: string }).action)).toEqual([
        "inspect",
        "secrets-add",
        "suspend",
        "start",
        "secrets",
      ]);
    }
    // A cold boot (the memory could not be restored) is said as such.
    const calls: unknown[] = [];
    const cold = await runReviewSetup(
      options(new FakeGuest({ liveOutput: `${liveLine}\n`, env: { ANTHROPIC_API_KEY: "PI_SANDBOX_SECRET_k" } }), {
        liveModel: { provider: "anthropic", model: "m" },
        hostEnv: { PI_CODING_AGENT_DIR: hostAgent },
        callAction: plainInstance(calls, { warm: false, reason: "the guest image changed" }),
        restart: true,
      }),
    );
    expect(cold.notes[0]).toMatch(/booted cold \(the guest image changed\): its services were started again/);
  });

  test("a provider whose token live mode cannot keep on the host is refused before the login is read or refreshed", async () => {
    await mkdir(hostAgent, { recursive: true });
    await writeFile(
      join(hostAgent, "auth.json"),
      JSON.stringify({
        "openai-codex": { type: "oauth", access: "a.b.c", refresh: "r", expires: 0 },
        openrouter: { type: "oauth", access: "or-1", refresh: "r", expires: 0 },
      }),
    );
    const cases: [string, RegExp, RegExp][] = [
      [
        "kimi-coding",
        /does not know the API hosts of kimi-coding or the shape of its token/,
        /openai-codex \(ChatGPT\)/,
      ],
      ["openrouter", /cannot keep a openrouter OAuth login/, /with an API key on the host/],
      ["fixture", /does not know the API hosts of fixture/, /anthropic, openai/],
    ];
    for (const [provider, message, hint] of cases) {
      const guest = new FakeGuest();
      let refreshed = false;
      await expect(
        runReviewSetup(
          options(guest, {
            liveModel: { provider, model: "m" },
            hostEnv: { PI_CODING_AGENT_DIR: hostAgent },
            refreshLogin: async () => void (refreshed = true),
          }),
        ),
      ).rejects.toMatchObject({ code: "REVIEW_SETUP_PROVIDER_UNSUPPORTED", message, hint });
      expect({ provider, commands: guest.commands, refreshed }).toEqual({ provider, commands: [], refreshed: false });
    }
  });

  test("--config declares a secret per credential of the host's logins, unset until a live refresh", async () => {
    await mkdir(hostAgent, { recursive: true });
    await writeFile(
      join(hostAgent, "auth.json"),
      JSON.stringify({
        anthropic: { type: "api_key", key: "sk-ant-api-K" },
        openai: { type: "api_key", key: "sk-O" },
        zzz: {},
      }),
    );
    const config = join(lockDir, "user.sandbox.yaml");
    await writeFile(config, "version: 1\nnetwork:\n  allowedHosts: [registry.npmjs.org, '*.openai.com']\n");
    const calls: unknown[] = [];
    const events: StepEvent[] = [];
    const guest = new FakeGuest();
    await runReviewSetup(
      options(guest, {
        name: "fresh",
        config,
        hostEnv: { PI_CODING_AGENT_DIR: hostAgent, PATH: process.env.PATH },
        callAction: async (input) => {
          calls.push(input);
          if ((input as { action: string }).action === "inspect")
            throw new ControllerError("CONTROLLER_NOT_FOUND", "no");
          return { state: "running" };
        },
        onProgress: (e) => events.push(e),
      }),
    );
    const derived = join(lockDir, "fresh.sandbox.yaml");
    expect(calls).toContainEqual({ action: "create", name: "fresh", config: derived });
    const secrets = join(lockDir, "secrets", "fresh");
    const made = await loadConfig(derived);
    expect(made.network).toEqual({
      allowedHosts: ["registry.npmjs.org", "*.openai.com", "api.anthropic.com"],
      hostPorts: [],
      secrets: {
        ANTHROPIC_API_KEY: { from: `file:${secrets}/ANTHROPIC_API_KEY`, hosts: ["api.anthropic.com"] },
        ANTHROPIC_OAUTH_TOKEN: {
          from: `file:${secrets}/ANTHROPIC_OAUTH_TOKEN`,
          hosts: ["api.anthropic.com"],
          placeholderPrefix: "sk-ant-oat01-",
        },
        OPENAI_API_KEY: { from: `file:${secrets}/OPENAI_API_KEY`, hosts: ["api.openai.com"] },
      },
    });
    for (const name of ["ANTHROPIC_API_KEY", "ANTHROPIC_OAUTH_TOKEN", "OPENAI_API_KEY"]) {
      expect(await readFile(join(secrets, name), "utf8")).toBe(`${unsetValue(name)}\n`);
      expect((await stat(join(secrets, name))).mode & 0o777).toBe(0o600);
    }
    const text = (await readFile(derived, "utf8")) + JSON.stringify(events);
    expect(text).not.toContain("sk-ant-api-K");
    expect(text).not.toContain("sk-O");

    // A config that declares one of those names itself is refused, naming it.
    await writeFile(
      config,
      "version: 1\nnetwork:\n  allowedHosts: [api.openai.com]\n  secrets:\n    OPENAI_API_KEY: { from: 'env:K', hosts: [api.openai.com] }\n",
    );
    await expect(
      runReviewSetup(
        options(new FakeGuest(), {
          name: "other",
          config,
          hostEnv: { PI_CODING_AGENT_DIR: hostAgent, PATH: process.env.PATH },
          callAction: async (input) => {
            if ((input as { action: string }).action === "inspect")
              throw new ControllerError("CONTROLLER_NOT_FOUND", "no");
            return { state: "running" };
          },
        }),
      ),
    ).rejects.toMatchObject({
      code: "REVIEW_SETUP_USAGE",
      message: expect.stringContaining("declares network.secrets OPENAI_API_KEY"),
    });
  });

  test("no generated response: LIVE_CHECK_FAILED, and the result is never live-ready", async () => {
    await login({ type: "api_key", key: "sk-ant-api-KEY" });
    const guest = new FakeGuest({
      liveOutput: '{"type":"message_end","message":{"role":"assistant","stopReason":"error","content":[]}}\n',
      env: { ANTHROPIC_API_KEY: "PI_SANDBOX_SECRET_x" },
    });
    await expect(
      runReviewSetup(
        options(guest, {
          liveModel: { provider: "anthropic", model: "m-1" },
          hostEnv: { PI_CODING_AGENT_DIR: hostAgent, PATH: process.env.PATH },
          callAction: controller(declared, []),
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
        options(guest, { liveModel: { provider: "openai", model: "m" }, hostEnv: { PI_CODING_AGENT_DIR: hostAgent } }),
      ),
    ).rejects.toMatchObject({ code: "REVIEW_SETUP_LOGIN_MISSING" });
    expect(guest.commands).toEqual([]);
  });
});
