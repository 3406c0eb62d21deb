// guest/local-models.ts, the extension --model-server installs in the guest, loaded by a real Pi
// process on the host: an isolated agent dir with the models.json review-setup writes (pointing at
// a fake server on 127.0.0.1 instead of host.sandbox.internal) and the extension file.
import { execFile } from "node:child_process";
import { copyFile, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { LOCAL_MODELS_EXTENSION, localProviderConfig } from "../src/local-models.js";
import { startFakeModelServer, type FakeModelServer } from "./support/fake-model-server.js";

const PI_CLI = join(
  dirname(createRequire(import.meta.url).resolve("@earendil-works/pi-coding-agent")),
  "bundle",
  "cli.js",
);

let dir: string;
let fake: FakeModelServer;

/** An agent dir as review-setup leaves it, for a server at `port` on 127.0.0.1. */
async function agentDir(name: string, port: number, ids: string[], key?: string): Promise<string> {
  const agent = join(dir, name);
  await mkdir(join(agent, "extensions"), { recursive: true });
  await copyFile(LOCAL_MODELS_EXTENSION, join(agent, "extensions", "local-models.ts"));
  const server = { given: "", port, hostUrl: "", guestUrl: `http://127.0.0.1:${port}/v1`, ...(key ? { key } : {}) };
  const local = localProviderConfig(server, { ids, model: ids[0]! });
  await writeFile(join(agent, "models.json"), JSON.stringify({ providers: { local } }));
  await writeFile(join(agent, "settings.json"), JSON.stringify({ retry: { enabled: false } }));
  return agent;
}

/** Runs Pi with `args` in the agent dir; stdin is `input`. */
function pi(agent: string, args: string[], input = "", env: NodeJS.ProcessEnv = {}) {
  return new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    const child = execFile(
      process.execPath,
      [PI_CLI, "--no-session", ...args],
      {
        cwd: dir,
        env: { ...process.env, PI_CODING_AGENT_DIR: agent, PI_SKIP_VERSION_CHECK: "1", ...env },
        timeout: 60_000,
      },
      (error, stdout, stderr) => resolve({ code: error ? ((error.code as number) ?? 1) : 0, stdout, stderr }),
    );
    child.stdin!.end(input);
  });
}

/** `get_available_models` over RPC: the `provider/id` list and every other event line. */
async function availableModels(agent: string, env: NodeJS.ProcessEnv = {}) {
  const run = await pi(agent, ["--mode", "rpc"], '{"id":"m","type":"get_available_models"}\n', env);
  const lines = run.stdout
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
  const reply = lines.find((line) => line.id === "m") as
    { data: { models: { provider: string; id: string; baseUrl: string }[] } } | undefined;
  if (!reply) throw new Error(`no get_available_models reply: ${run.stdout}\n${run.stderr}`);
  return {
    models: reply.data.models.filter((m) => m.provider === "local").map((m) => `${m.provider}/${m.id}`),
    baseUrls: [...new Set(reply.data.models.filter((m) => m.provider === "local").map((m) => m.baseUrl))],
    notices: lines.filter((line) => line.method === "notify").map((line) => `${line.notifyType}: ${line.message}`),
  };
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "review-local-models-"));
  fake = await startFakeModelServer(["model-a"]);
});
afterAll(async () => {
  await fake.close();
  await rm(dir, { recursive: true, force: true });
});

test("Pi answers a prompt through the local provider, after reading the server's list at session start", async () => {
  const agent = await agentDir("prompt", fake.port, ["model-a"]);
  fake.seen.length = 0;
  const run = await pi(agent, ["--model", "local/model-a", "-p", "say hello"]);
  expect(run.stderr).toBe("");
  expect(run.stdout.trim()).toBe("served by model-a: say hello");
  expect(run.code).toBe(0);
  expect(fake.seen.map((r) => `${r.method} ${r.url} ${r.model ?? ""}`.trim())).toEqual([
    "GET /v1/models",
    "POST /v1/chat/completions model-a",
  ]);
});

test("the model list follows the server: added models appear, removed ones go, without touching models.json", async () => {
  const agent = await agentDir("follow", fake.port, ["model-a"]);
  fake.models.push("model-b");
  expect(await availableModels(agent)).toEqual({
    models: ["local/model-a", "local/model-b"],
    baseUrls: [`http://127.0.0.1:${fake.port}/v1`],
    notices: [],
  });
  fake.models.splice(0, 1);
  expect((await availableModels(agent)).models).toEqual(["local/model-b"]);
  fake.models.splice(0, fake.models.length, "model-a");
});

test("PI_OFFLINE keeps the seed and asks the server nothing", async () => {
  const agent = await agentDir("offline", fake.port, ["model-a", "seeded-only"]);
  fake.seen.length = 0;
  expect((await availableModels(agent, { PI_OFFLINE: "1" })).models).toEqual(["local/model-a", "local/seeded-only"]);
  expect(fake.seen).toEqual([]);
});

test("a server that is down: Pi warns with its URL and what to do, and keeps the seed", async () => {
  const down = await startFakeModelServer([]);
  const port = down.port;
  await down.close();
  const agent = await agentDir("down", port, ["model-a"]);
  expect(await availableModels(agent)).toEqual({
    models: ["local/model-a"],
    baseUrls: [`http://127.0.0.1:${port}/v1`],
    notices: [
      `warning: Could not reach the model server at http://127.0.0.1:${port}/v1/models (ECONNREFUSED). ` +
        `Start it so that it listens on 127.0.0.1:${port}, then open /model to refresh; Pi keeps the models it already lists.`,
    ],
  });
});

test("with --model-server-key, Pi and the extension send $MODEL_SERVER_KEY as the Bearer key (in the guest, the placeholder)", async () => {
  // No VM here: the variable holds the key itself, as the host's proxy makes of the placeholder.
  const keyed = await startFakeModelServer(["model-k"]);
  keyed.key = "key-for-the-fake";
  try {
    const agent = await agentDir("keyed", keyed.port, ["model-k"], "env:ANYTHING");
    const run = await pi(agent, ["--model", "local/model-k", "-p", "hi"], "", { MODEL_SERVER_KEY: keyed.key });
    expect(run.stdout.trim()).toBe("served by model-k: hi");
    expect(keyed.seen.map((r) => `${r.method} ${r.url} ${r.keyed}`)).toEqual([
      "GET /v1/models true",
      "POST /v1/chat/completions true",
    ]);
    const refused = await availableModels(agent, { MODEL_SERVER_KEY: "wrong" });
    expect(refused.notices).toEqual([
      `warning: The model server at http://127.0.0.1:${keyed.port}/v1/models answered HTTP 401: it refused the key; ` +
        "check the key file or variable given to sandbox:setup --model-server-key.",
    ]);
  } finally {
    await keyed.close();
  }
});
