// The refresh on a real VM, driven through the CLI entry as a user runs it, against the fixture
// monorepo (fixture.ts: a lockfile, an npm workspace, a build), so that each refresh takes seconds.
import { mkdir, mkdtemp, readFile, rm, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction } from "@pi-sandbox/controller/client";
import { main } from "../src/main.js";
import { FIXTURE_LOCK, FIXTURE_WORKSPACE, NPM_REGISTRY_REQUESTS, makeFixtureRepo } from "./support/fixture.js";

const NAME = "rev";
// Guest places a token could leak to (the rootfs is too large to grep whole under TCG).
const SEARCHED = "/workspace /tmp /root /etc /home /var";
let dir: string;
let repo: string;
let env: NodeJS.ProcessEnv;
let configPath: string;

const call = (action: Record<string, unknown>) =>
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- results are loose JSON in tests
  callAction({ name: NAME, ...action }, { env, cwd: dir }) as Promise<any>;

async function guestRun(cmd: string): Promise<{ exitCode: number; output: string }> {
  const reply = await call({ action: "exec", cmd, timeoutMs: 60_000 });
  expect(reply.running).toBe(false);
  return reply;
}

async function setup(...extra: string[]) {
  return setupWatching(() => undefined, ...extra);
}

/** Like setup, calling `watch` with every stderr chunk (progress lines) as it arrives. */
async function setupWatching(watch: (text: string) => void, ...extra: string[]) {
  let stdout = "";
  let stderr = "";
  const code = await main(["--name", NAME, "--repo", repo, "--pi-command", "node launch.js", ...extra], {
    stdout: (text) => (stdout += text),
    stderr: (text) => {
      stderr += text;
      watch(text);
    },
    env,
    cwd: dir,
  });
  return { code, stdout, stderr };
}

const currentTarget = async () => (await guestRun("readlink /workspace/.review/current")).output.trim();

beforeAll(async () => {
  const image = process.env.PI_SANDBOX_TEST_IMAGE;
  if (!image) throw new Error("PI_SANDBOX_TEST_IMAGE is not set: run through jest's globalSetup");
  dir = await mkdtemp(join(tmpdir(), "prs-"));
  repo = await makeFixtureRepo();
  // The shipped example config, on the test image and the smallest profile.
  const example = await readFile(new URL("../sandbox.review.yaml", import.meta.url), "utf8");
  configPath = join(dir, "sandbox.yaml");
  await writeFile(configPath, example.replace("profile: small", `image: ${image}\nprofile: tiny`));
  env = { ...process.env, PI_SANDBOX_HOME: join(dir, "state"), PI_CODING_AGENT_DIR: join(dir, "host-agent") };
});

afterAll(async () => {
  await call({ action: "stop" }).catch(() => undefined);
  // The daemon writes its last log lines a moment after the stop's answer: retry a directory that
  // filled again while it was being emptied (ENOTEMPTY).
  await rm(dir, { recursive: true, force: true, maxRetries: 10 });
  await rm(repo, { recursive: true, force: true });
});

test("a missing instance without --config fails with the fix", async () => {
  const run = await setup();
  expect(run.code).toBe(1);
  expect(run.stderr).toContain("REVIEW_SETUP_INSTANCE_MISSING");
  expect(run.stderr).toContain("--config");
});

test("--config creates the instance, then the first refresh installs, builds and selects a candidate", async () => {
  const run = await setup("--config", configPath);
  expect(run.code).toBe(0);
  for (const step of ["instance", "snapshot", "transfer", "verify", "unpack", "install", "build", "switch", "agent"]) {
    expect(run.stderr).toContain(`[${step}] ✓`);
  }
  expect(run.stdout).toContain("OFFLINE SNAPSHOT");
  expect(run.stdout).not.toContain("LIVE-READY");
  expect(run.stdout).toMatch(/sha256 [0-9a-f]{64} \(verified in the guest\)/);
  expect(run.stdout).toContain("Herdr not found");
  expect((await guestRun("cat /workspace/.review/current/dist/out.txt")).output).toBe("a.txt: alpha\nb.txt: bravo\n");
  // npm ci linked the workspace, and its build ran in the guest (dist is not in the snapshot).
  const workspace = await guestRun(
    `cd /workspace/.review/current && readlink node_modules/${FIXTURE_WORKSPACE.name} && head -1 ${FIXTURE_WORKSPACE.dir}/dist/index.js`,
  );
  expect(workspace.output).toBe(`../../${FIXTURE_WORKSPACE.dir}\n// built\n`);
  expect((await guestRun("stat -c %a /workspace/.review/agent")).output.trim()).toBe("700");
});

test("a refresh carries edits and deletions, not untracked files, and the launch command runs", async () => {
  const first = await currentTarget();
  await writeFile(join(repo, "src", "a.txt"), "alpha edited\n");
  await unlink(join(repo, "src", "b.txt"));
  await writeFile(join(repo, "src", "c.txt"), "untracked\n");
  const run = await setup();
  expect(run.code).toBe(0);
  const second = await currentTarget();
  expect(second).not.toBe(first);
  expect(run.stdout).toContain(`previous: ${first.split("/").pop()}`);
  expect((await guestRun("cat /workspace/.review/current/dist/out.txt")).output).toBe("a.txt: alpha edited\n");
  expect((await guestRun("ls /workspace/.review/current/src")).output).toBe("a.txt\n");

  const launch = run.stdout.split("\n").find((line) => line.trim().startsWith("cd /workspace/.review/current"));
  expect(launch?.trim()).toBe(
    "cd /workspace/.review/current && PI_CODING_AGENT_DIR=/workspace/.review/agent node launch.js",
  );
  const launched = await guestRun(launch!.trim());
  expect(launched.exitCode).toBe(0);
  expect(launched.output).toMatch(
    new RegExp(`^launched cwd=/workspace/.review/${second} agent=/workspace/.review/agent node=v24\\.`),
  );
});

test("a second refresh while one runs fails fast naming the first; the first completes", async () => {
  let transferring!: () => void;
  const holding = new Promise<void>((resolve) => (transferring = resolve));
  const first = setupWatching((text) => {
    if (text.includes("[transfer]")) transferring();
  });
  await holding;
  const t0 = Date.now();
  const second = await setup();
  const refusedInMs = Date.now() - t0;
  expect(second.code).toBe(1);
  expect(second.stderr).toContain(
    `error REVIEW_SETUP_BUSY: instance ${NAME} is already being refreshed by pid ${process.pid}`,
  );
  expect(second.stderr).toContain(`snapshotting ${repo}`);
  expect(second.stderr).toMatch(/hint: Wait for that refresh to finish/);
  // Fast: only the instance check and the guest probe ran (each a round trip to the daemon).
  expect(refusedInMs).toBeLessThan(60_000);
  const done = await first;
  expect(done.code).toBe(0);
  // Its lock is gone with it: the next test's refresh gets as far as the install.
});

test("a broken lockfile fails at install, names the log, and the previous candidate stays current", async () => {
  const before = await currentTarget();
  await writeFile(join(repo, "package-lock.json"), "{ this is not json");
  const run = await setup();
  await writeFile(join(repo, "package-lock.json"), FIXTURE_LOCK);
  expect(run.code).toBe(1);
  expect(run.stderr).toContain("REVIEW_SETUP_STEP_FAILED");
  const log = /log: (\/workspace\/\.review\/logs\/\S+\/install\.log)/.exec(run.stderr)?.[1];
  expect(log).toBeDefined();
  expect(run.stderr).toContain(`candidate ${before.split("/").pop()} stays current`);
  expect(await currentTarget()).toBe(before);
  expect((await guestRun(`grep -ci 'npm error' ${log}`)).output.trim()).not.toBe("0");
  expect((await guestRun("cat /workspace/.review/current/dist/out.txt")).output).toBe("a.txt: alpha edited\n");
});

test("a registry package is fetched through the sandbox's egress once; the next refresh takes it from the guest's npm cache", async () => {
  // ms@2.1.3 (one file, no dependencies) as a real registry dependency of the root package.
  const pkg = JSON.parse(await readFile(join(repo, "package.json"), "utf8"));
  await writeFile(join(repo, "package.json"), JSON.stringify({ ...pkg, dependencies: { ms: "2.1.3" } }, null, 2));
  const lock = JSON.parse(FIXTURE_LOCK);
  lock.packages[""].dependencies = { ms: "2.1.3" };
  lock.packages["node_modules/ms"] = {
    version: "2.1.3",
    resolved: "https://registry.npmjs.org/ms/-/ms-2.1.3.tgz",
    integrity: "sha512-6FlzubTLZG3J2a/NVCAleEhjzq5oxgHyaCU9yYXvcLsvoVaHJq/s5xXI6/XXP6tz7R9xAOtHnSO/tXtF3WRTlA==",
    license: "MIT",
  };
  await writeFile(join(repo, "package-lock.json"), JSON.stringify(lock, null, 2));
  // What npm asked the registry for during a refresh.
  const fetchedBy = async (run: () => Promise<{ code: number }>) => {
    await guestRun("rm -f /root/.npm/_logs/*");
    expect((await run()).code).toBe(0);
    return (await guestRun(`${NPM_REGISTRY_REQUESTS} | grep -o 'http fetch GET [0-9]* [^ ]*'`)).output;
  };
  await guestRun("rm -rf /root/.npm/_cacache"); // whatever the image's own npm installs left there
  expect(await fetchedBy(() => setup())).toBe("http fetch GET 200 https://registry.npmjs.org/ms/-/ms-2.1.3.tgz\n");
  const load = 'cd /workspace/.review/current && node -e \'console.log(require("ms")("2 days"))\'';
  expect((await guestRun(load)).output.trim()).toBe("172800000");
  expect(await fetchedBy(() => setup())).toBe("");
  expect((await guestRun(load)).output.trim()).toBe("172800000");
});

test("live mode on an instance created without the host's login: the secret is added, no restart unasked, nothing copied into the guest", async () => {
  // The instance was created while the host had no Pi login, so it declares no secrets.
  const key = `sk-ant-api03-fixture-${Date.now()}`;
  await mkdir(join(dir, "host-agent"), { recursive: true });
  await writeFile(join(dir, "host-agent", "auth.json"), JSON.stringify({ anthropic: { type: "api_key", key } }));
  const run = await setup("--live-model", "anthropic/claude-x");
  expect(run.code).toBe(1);
  expect(run.stderr).toContain(`added network.secrets ANTHROPIC_API_KEY, ANTHROPIC_OAUTH_TOKEN to ${NAME}`);
  expect(run.stderr).toContain("REVIEW_SETUP_RESTART_NEEDED");
  expect(run.stderr).toMatch(/hint: Rerun with --restart/);
  expect((await call({ action: "inspect" })).state).toBe("running"); // not restarted
  const unsupported = await setup("--live-model", "kimi-coding/k2");
  expect(unsupported.code).toBe(1);
  expect(unsupported.stderr).toContain("REVIEW_SETUP_PROVIDER_UNSUPPORTED");
  expect(run.stdout + run.stderr + unsupported.stdout + unsupported.stderr).not.toContain(key);
  expect((await guestRun(`grep -rl ${key} ${SEARCHED} 2>/dev/null`)).output).toBe("");
});

test("a stopped instance is refused with the fix", async () => {
  await call({ action: "stop" });
  const run = await setup();
  expect(run.code).toBe(1);
  expect(run.stderr).toContain("REVIEW_SETUP_INSTANCE_NOT_RUNNING");
  expect(run.stderr).toContain(`npx pi-sandbox start ${NAME}`);
});
