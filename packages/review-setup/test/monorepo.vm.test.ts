// A refresh of THIS repository on a real VM, then the printed launch command runs the candidate's
// real Pi in the guest, offline (exported: the launch command starts with `cd … &&`, so a prefix
// would only reach `cd`). Scope `pi` (what the launch command loads), because the whole
// workspace's `npm ci` takes longer than a test may under TCG (README, "Install scope").
// The guest's npm cache is warm, as on any refresh after an instance's first: the host fills a
// cache with exactly what this lockfile's `pi` install fetches, and the guest gets it before the
// refresh. A cold first install asks the registry 300 times, each request a new TLS handshake in
// the TCG guest (the egress closes every connection), which took 13 to 30+ min and failed CI
// twice; the registry path itself is proven by the fixture refresh in review.vm.test.ts. The
// refresh's `--prefer-offline` must then install without a single registry request.
import { execFileSync } from "node:child_process";
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { callAction } from "@pi-sandbox/controller/client";
import { controllerGuest, type GuestSession } from "../src/guest.js";
import { main } from "../src/main.js";
import { FAKE_OPENAI_JS, NPM_REGISTRY_REQUESTS } from "./support/fixture.js";

const NAME = "mono";
const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const AGENT = "/workspace/.review/agent";
let dir: string;
let env: NodeJS.ProcessEnv;
let guest: GuestSession;
let launch: string;

/** Prints the sandbox tool's end event and the last assistant message of a Pi JSON event stream. */
const SUMMARIZE_JS = `const lines = require("fs").readFileSync(process.argv[2], "utf8").split("\\n").filter((l) => l.startsWith("{"));
const events = lines.map((l) => JSON.parse(l));
const tool = events.find((e) => e.type === "tool_execution_end");
const last = events.filter((e) => e.type === "message_end" && e.message.role === "assistant").pop();
const text = (content) => (content || []).map((p) => p.text || "").join("").slice(0, 200);
console.log(JSON.stringify({
  toolEnd: tool && { toolName: tool.toolName, isError: tool.isError, text: text(tool.result.content) },
  final: last && { role: last.message.role, provider: last.message.provider, model: last.message.model, text: text(last.message.content) },
}));
`;
const timings: string[] = [];
// Under TCG on 2 cores at load 5 to 10 the warm-cache `npm ci` took 19 min (with g++ building
// ssh2's and cpu-features' native addons) and the seven tsc builds about 12; a quiet CI host is
// faster, a busy one slower.
const REFRESH_TIMEOUT_MS = 3_000_000;

const call = (action: Record<string, unknown>) =>
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- results are loose JSON in tests
  callAction({ name: NAME, ...action }, { env, cwd: dir }) as Promise<any>;

/**
 * A gzip tar of an npm cache holding what `npm ci --workspace @pi-sandbox/pi-extension` fetches
 * for this checkout's lockfile: made by that install on the host (scripts off) in a copy of the
 * package.json files and the lockfile.
 */
async function hostNpmCache(): Promise<string> {
  const work = join(dir, "seed");
  const files = execFileSync("git", ["ls-files", "package.json", "package-lock.json", "*/package.json"], {
    cwd: REPO,
    encoding: "utf8",
  });
  for (const file of files.split("\n").filter(Boolean)) {
    await mkdir(dirname(join(work, file)), { recursive: true });
    await cp(join(REPO, file), join(work, file));
  }
  const cache = join(dir, "npm-cache");
  execFileSync(
    "npm",
    ["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--workspace", "@pi-sandbox/pi-extension", "--cache", cache],
    { cwd: work, stdio: "ignore" },
  );
  const archive = join(dir, "npm-cache.tar.gz");
  execFileSync("tar", ["-czf", archive, "-C", cache, "_cacache"]);
  return archive;
}

beforeAll(async () => {
  const image = process.env.PI_SANDBOX_TEST_IMAGE;
  if (!image) throw new Error("PI_SANDBOX_TEST_IMAGE is not set: run through jest's globalSetup");
  dir = await mkdtemp(join(tmpdir(), "prm-"));
  env = { ...process.env, PI_SANDBOX_HOME: join(dir, "state") };
  const example = await readFile(new URL("../sandbox.review.yaml", import.meta.url), "utf8");
  await writeFile(join(dir, "sandbox.yaml"), example.replace("profile: small", `image: ${image}\nprofile: small`));
  guest = controllerGuest(NAME, { env, cwd: dir });
  // One after the other: on a busy host the daemon's start shares the cores with nothing of ours.
  const archive = await hostNpmCache();
  await call({ action: "create", config: join(dir, "sandbox.yaml") });
  await guest.upload(archive, "/root/npm-cache.tar.gz");
  const unpacked = await guest.exec(
    "mkdir -p /root/.npm && tar -xzf /root/npm-cache.tar.gz -C /root/.npm && rm -f /root/npm-cache.tar.gz /root/.npm/_logs/*",
  );
  if (unpacked.exitCode !== 0) throw new Error(`unpacking the npm cache failed: ${unpacked.output}`);
}, 900_000);

afterAll(async () => {
  process.stderr.write(`monorepo refresh timings (TCG):\n${timings.join("\n")}\n`);
  await call({ action: "stop" }).catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
});

test(
  "a refresh of this repository with --scope pi installs from the lockfile, builds, and prints the launch command",
  async () => {
    let stdout = "";
    let stderr = "";
    const started = Date.now();
    const code = await main(["--name", NAME, "--repo", REPO, "--scope", "pi"], {
      stdout: (text) => (stdout += text),
      stderr: (text) => {
        stderr += text;
        for (const line of text.split("\n")) {
          if (/^\[\w[\w-]*\] [✓…]/.test(line))
            timings.push(`  +${((Date.now() - started) / 1000).toFixed(0)} s ${line}`);
        }
      },
      env,
      cwd: dir,
    });
    if (code !== 0) throw new Error(`refresh failed:\n${stderr}`);
    expect(stderr).toContain(
      "[install] … npm ci --no-audit --no-fund --prefer-offline --workspace @pi-sandbox/pi-extension",
    );
    // With the cache warm, npm asked the registry nothing.
    const requests = await guest.exec(`${NPM_REGISTRY_REQUESTS} | wc -l`);
    expect(requests.output.trim()).toBe("0");
    expect(stderr).toMatch(
      /\[build\] … .*npm run build --workspace @pi-sandbox\/controller && npm run build --workspace @pi-sandbox\/pi-extension/,
    );
    expect(stdout).toContain("scope:    pi");
    launch = stdout
      .split("\n")
      .map((line) => line.trim())
      .find((line) => line.startsWith("cd /workspace/.review/current"))!;
    expect(launch).toBe(
      `cd /workspace/.review/current && PI_CODING_AGENT_DIR=${AGENT} node_modules/.bin/pi -e ./packages/pi-extension`,
    );
    // The lockfile's Pi, built extension and controller are in the candidate.
    const built = await guest.exec(
      "cd /workspace/.review/current && ls packages/pi-extension/dist/index.js packages/controller/dist/client/index.js",
    );
    expect(built.exitCode).toBe(0);
  },
  REFRESH_TIMEOUT_MS,
);

test("the printed launch command runs the candidate's Pi: --version", async () => {
  const lock = JSON.parse(await readFile(join(REPO, "package-lock.json"), "utf8"));
  const version = lock.packages["node_modules/@earendil-works/pi-coding-agent"].version as string;
  const result = await guest.exec(`export PI_OFFLINE=1 PI_SKIP_VERSION_CHECK=1; ${launch} --version`, {
    deadlineMs: 300_000,
  });
  expect(result.output.trim().split("\n").at(-1)).toBe(version);
  expect(result.exitCode).toBe(0);
});

test("fixture-backed prompt: the launched Pi loads the extension and its sandbox tool answers a fake model on the guest's loopback", async () => {
  await call({ action: "write", path: "/tmp/fake_openai.js", content: FAKE_OPENAI_JS });
  await call({
    action: "service-start",
    service: "fake-openai",
    command: "node /tmp/fake_openai.js 18181",
    port: 18181,
  });
  const models = {
    providers: {
      fake: {
        baseUrl: "http://127.0.0.1:18181/v1",
        api: "openai-completions",
        apiKey: "dummy",
        models: [{ id: "fake-model" }],
      },
    },
  };
  await call({ action: "write", path: `${AGENT}/models.json`, content: JSON.stringify(models) });
  await call({
    action: "write",
    path: `${AGENT}/settings.json`,
    content: JSON.stringify({ retry: { enabled: false } }),
  });
  const result = await guest.exec(
    `export PI_OFFLINE=1 PI_SKIP_VERSION_CHECK=1; ${launch} --no-session --mode json --model fake/fake-model 'use the sandbox tool' ` +
      "> /tmp/pi-run.jsonl 2> /tmp/pi-run.err; rc=$?; tail -c 2000 /tmp/pi-run.err; exit $rc",
    { deadlineMs: 600_000 },
  );
  expect(result.exitCode).toBe(0);
  // The event stream is larger than one exec's output (64 KiB): summarise it in the guest.
  await call({ action: "write", path: "/tmp/summarize.js", content: SUMMARIZE_JS });
  const summary = await guest.exec("node /tmp/summarize.js /tmp/pi-run.jsonl");
  expect(summary.exitCode).toBe(0);
  const { toolEnd, final } = JSON.parse(summary.output);
  expect(toolEnd).toMatchObject({ toolName: "sandbox", isError: false });
  expect(toolEnd.text).toContain("pi-sandbox: named local dev environments");
  expect(final).toMatchObject({ role: "assistant", provider: "fake", model: "fake-model" });
  expect(final.text).toMatch(/^FINAL: pi-sandbox: named local dev environments/);
});
