// --model-server on the host: the URL, the model list read over real HTTP, the instance's host
// port, and the orchestration against a scripted guest.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "@pi-sandbox/config";
import { ControllerError } from "@pi-sandbox/controller/client";
import { parseCommandLine } from "../src/args.js";
import { ensureInstance } from "../src/instance.js";
import { LOCAL_MODELS_EXTENSION, localProviderConfig } from "../src/local-models.js";
import {
  LOCAL_MODEL_VARIABLE,
  modelServerSecret,
  parseModelServer,
  parseModelServerKey,
  readServedModels,
  requireModelServerSecret,
  servedModelsOf,
} from "../src/model-server.js";
import { runReviewSetup, type StepEvent } from "../src/refresh.js";
import { localModel, modelsOf } from "../guest/local-models.js";
import { FakeGuest } from "./support/fake-guest.js";
import { startFakeModelServer, type FakeModelServer } from "./support/fake-model-server.js";
import { makeFixtureRepo } from "./support/fixture.js";

let dir: string;
let repo: string;
let fake: FakeModelServer;
const servers: Server[] = [];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "review-model-server-"));
  repo = await makeFixtureRepo();
  fake = await startFakeModelServer(["qwen3-8b", "gemma-3-12b"]);
});
afterAll(async () => {
  await fake.close();
  for (const server of servers) {
    server.close();
    server.closeAllConnections();
  }
  await rm(dir, { recursive: true, force: true });
  await rm(repo, { recursive: true, force: true });
});

/** A one-off HTTP server on 127.0.0.1 answering every request with `handler`. */
async function serve(handler: Parameters<typeof createServer>[1]): Promise<number> {
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return (server.address() as AddressInfo).port;
}

/** A port on 127.0.0.1 where nothing listens. */
async function deadPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

test("--model-server takes the host's loopback over http, with /v1 as the default base", () => {
  expect(parseModelServer("http://127.0.0.1:8000")).toEqual({
    given: "http://127.0.0.1:8000",
    port: 8000,
    hostUrl: "http://127.0.0.1:8000/v1",
    guestUrl: "http://host.sandbox.internal:8000/v1",
  });
  expect(parseModelServer("http://localhost:1234/v1/")).toMatchObject({
    port: 1234,
    hostUrl: "http://127.0.0.1:1234/v1",
  });
  expect(parseModelServer("http://127.0.0.1:11434/api/v1")).toMatchObject({
    guestUrl: "http://host.sandbox.internal:11434/api/v1",
  });
  expect(parseModelServer("http://127.0.0.1")).toMatchObject({ port: 80 });
  const args = parseCommandLine(["--name", "r", "--model-server", "http://127.0.0.1:8000"]);
  expect(args).toMatchObject({ modelServer: { port: 8000 } });
});

test.each([
  ["nonsense", /is not a URL/, /Example/],
  ["https://127.0.0.1:8000", /must be an http:\/\/ URL/, /plain HTTP/],
  ["http://192.168.1.10:8000", /must be on this host's 127\.0\.0\.1; got 192\.168\.1\.10/, /network\.hostPorts/],
  ["http://[::1]:8000", /must be on this host's 127\.0\.0\.1/, /host\.sandbox\.internal/],
  ["http://user:sk-123@127.0.0.1:8000", /a user or key in the URL is not supported/, /--model-server-key env:VAR/],
  ["http://127.0.0.1:8000/v1?key=1", /has a query or fragment/, /base URL only/],
])("--model-server %s is refused with a usage error", (url, message, hint) => {
  expect(() => parseModelServer(url)).toThrow(
    expect.objectContaining({
      code: "REVIEW_SETUP_USAGE",
      message: expect.stringMatching(message),
      hint: expect.stringMatching(hint),
    }),
  );
});

test("a key given in the URL never appears in the error", () => {
  const error = (() => {
    try {
      parseModelServer("http://me:sk-secret@127.0.0.1:8000");
    } catch (e) {
      return e as Error & { hint: string };
    }
  })()!;
  expect(`${error.message} ${error.hint}`).not.toContain("sk-secret");
});

test("--model-server and --live-model exclude each other", () => {
  expect(() =>
    parseCommandLine(["--name", "r", "--live-model", "openai/gpt", "--model-server", "http://127.0.0.1:8000"]),
  ).toThrow(
    expect.objectContaining({
      code: "REVIEW_SETUP_USAGE",
      message: "--live-model and --model-server exclude each other",
    }),
  );
});

test("the model list is read over HTTP; the launch model is the first the server marks loaded", async () => {
  const server = parseModelServer(`http://127.0.0.1:${fake.port}`);
  expect(await readServedModels(server)).toEqual({ ids: ["qwen3-8b", "gemma-3-12b"], model: "qwen3-8b" });
  expect(fake.seen.at(-1)).toEqual({ method: "GET", url: "/v1/models" });

  // llama.cpp's router says which models are loaded.
  expect(
    servedModelsOf({
      data: [
        { id: "a", status: { value: "unloaded" } },
        { id: "b", status: { value: "loaded" } },
        { id: "b", status: { value: "loaded" } },
      ],
    }),
  ).toEqual([
    { id: "a", loaded: false },
    { id: "b", loaded: true },
  ]);
  // Ids that are not strings, empty, too long or hold control characters are left out.
  expect(
    servedModelsOf({
      data: [{ id: 7 }, { id: " " }, { id: "x".repeat(257) }, { id: "a\u001b[2Jb" }, null, { id: "ok" }],
    }),
  ).toEqual([{ id: "ok", loaded: false }]);
  expect(servedModelsOf({ models: [] })).toEqual([]);
  expect(servedModelsOf(null)).toEqual([]);
});

test("context windows come from the model list (max_context_window, context_length, max_model_len) into models.json and the extension", async () => {
  const list = {
    data: [
      { id: "omlx-model", max_context_window: 32768 },
      { id: "lmstudio-model", context_length: 8192 },
      { id: "vllm-model", max_model_len: 131072 },
      { id: "plain-model" },
      { id: "odd-model", context_length: -1, max_model_len: "big" },
    ],
  };
  const http = createServer((_req, res) =>
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(list)),
  );
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
  try {
    const server = parseModelServer(`http://127.0.0.1:${(http.address() as AddressInfo).port}`);
    const served = await readServedModels(server, { env: {} });
    expect(served.contextWindows).toEqual({ "omlx-model": 32768, "lmstudio-model": 8192, "vllm-model": 131072 });
    expect((localProviderConfig(server, served).models as unknown[]).slice(0, 4)).toEqual([
      { id: "omlx-model", contextWindow: 32768 },
      { id: "lmstudio-model", contextWindow: 8192 },
      { id: "vllm-model", contextWindow: 131072 },
      { id: "plain-model" },
    ]);
    // The guest extension reads the same fields from the live list, and its seed from models.json.
    const windows = (body: unknown) =>
      modelsOf(body).map(
        (m) => (localModel(m.id, "http://x/v1", m.contextWindow) as { contextWindow?: number }).contextWindow,
      );
    expect(windows(list)).toEqual([32768, 8192, 131072, 128_000, 128_000]);
    expect(windows({ data: localProviderConfig(server, served).models })).toEqual([
      32768, 8192, 131072, 128_000, 128_000,
    ]);

    // A pinned model the server lists is the one launched; one it does not list is an error naming those it does.
    expect((await readServedModels(server, { env: { [LOCAL_MODEL_VARIABLE]: "vllm-model" } })).model).toBe(
      "vllm-model",
    );
    await expect(readServedModels(server, { env: { [LOCAL_MODEL_VARIABLE]: "qwen-typo" } })).rejects.toMatchObject({
      code: "REVIEW_SETUP_MODEL_NOT_SERVED",
      message: expect.stringMatching(
        /PI_SANDBOX_LOCAL_MODEL pins "qwen-typo", which .* does not list; it lists omlx-model, lmstudio-model, vllm-model, plain-model, odd-model$/,
      ),
      hint: expect.stringContaining("Set PI_SANDBOX_LOCAL_MODEL to one of the listed ids"),
    });
  } finally {
    http.close();
  }
});

test("a server that is not there: the error names the URL and says to start the server", async () => {
  const port = await deadPort();
  await expect(readServedModels(parseModelServer(`http://127.0.0.1:${port}`))).rejects.toMatchObject({
    code: "REVIEW_SETUP_MODEL_SERVER_UNREACHABLE",
    message: `the model server at http://127.0.0.1:${port}/v1/models did not answer (ECONNREFUSED)`,
    hint: expect.stringMatching(
      new RegExp(`^Start the model server so that it listens on 127\\.0\\.0\\.1:${port} .*then rerun`),
    ),
  });
});

test("a server that does not answer in time is unreachable too", async () => {
  const port = await serve(() => undefined); // accepts, never answers
  await expect(
    readServedModels(parseModelServer(`http://127.0.0.1:${port}`), { timeoutMs: 300 }),
  ).rejects.toMatchObject({
    code: "REVIEW_SETUP_MODEL_SERVER_UNREACHABLE",
    message: expect.stringContaining("(no answer in 0.3 s)"),
  });
});

test("HTTP errors, non-JSON, empty and oversized lists are refused with what to do", async () => {
  const answers: Record<string, [number, string]> = {
    "/key/models": [401, '{"error":"invalid api key"}'],
    "/gone/models": [404, "not found"],
    "/html/models": [200, "<html>a web page</html>"],
    "/empty/models": [200, '{"object":"list","data":[]}'],
    "/huge/models": [200, JSON.stringify({ data: [{ id: "x".repeat(5 * 1024 * 1024) }] })],
  };
  const port = await serve((req, res) => {
    const [status, body] = answers[req.url ?? ""] ?? [500, ""];
    res.writeHead(status).end(body);
  });
  const read = (path: string) => readServedModels(parseModelServer(`http://127.0.0.1:${port}${path}`));
  await expect(read("/key")).rejects.toMatchObject({
    code: "REVIEW_SETUP_MODEL_SERVER_REFUSED",
    message: `the model server at http://127.0.0.1:${port}/key/models answered HTTP 401`,
    hint: expect.stringContaining("run the server without key checks"),
  });
  await expect(read("/gone")).rejects.toMatchObject({
    code: "REVIEW_SETUP_MODEL_SERVER_REFUSED",
    hint: expect.stringContaining("OpenAI-compatible base URL"),
  });
  await expect(read("/html")).rejects.toMatchObject({
    code: "REVIEW_SETUP_MODEL_SERVER_NO_MODELS",
    message: `the answer of http://127.0.0.1:${port}/html/models is not JSON`,
  });
  await expect(read("/empty")).rejects.toMatchObject({
    code: "REVIEW_SETUP_MODEL_SERVER_NO_MODELS",
    message: `the model server at http://127.0.0.1:${port}/empty/models lists no models`,
    hint: expect.stringContaining("load a model"),
  });
  await expect(read("/huge")).rejects.toMatchObject({
    code: "REVIEW_SETUP_MODEL_SERVER_NO_MODELS",
    message: expect.stringContaining("is larger than 4194304 bytes"),
  });
});

describe("the instance's host port", () => {
  const created: unknown[] = [];
  const controller = (view?: Record<string, unknown>) => async (input: unknown) => {
    const action = input as { action: string };
    if (action.action === "inspect") {
      if (!view) throw new ControllerError("CONTROLLER_NOT_FOUND", "no instance named review");
      return view;
    }
    created.push(input);
    return { state: "running" };
  };

  test("--config: the instance is created from the same config plus the port, kept 0600 in the state dir", async () => {
    const config = join(dir, "sandbox.yaml");
    await writeFile(
      config,
      "version: 1\nprofile: small\nimage: ./image\nnetwork:\n  allowedHosts: [registry.npmjs.org]\n  hostPorts: [5432]\n",
    );
    const infos: string[] = [];
    const configDir = join(dir, "state-review-setup");
    created.length = 0;
    await ensureInstance(
      { name: "review", config: "sandbox.yaml", hostPort: 8000, configDir, callAction: controller() },
      { cwd: dir },
      (m) => infos.push(m),
    );
    const derived = join(configDir, "review.sandbox.yaml");
    expect(created).toEqual([{ action: "create", name: "review", config: derived }]);
    expect((await stat(derived)).mode & 0o777).toBe(0o600);
    const [original, copy] = await Promise.all([loadConfig(config), loadConfig(derived)]);
    expect(copy).toEqual({ ...original, network: { ...original.network, hostPorts: [5432, 8000] } });
    expect(copy.image).toBe(join(dir, "image")); // resolved against the original file's directory
    expect(infos).toEqual([`creating from ${derived}: ${config} plus network.hostPorts 8000 (the model server)`]);
    expect(await readFile(derived, "utf8")).toMatch(/^# .*sandbox\.yaml plus network\.hostPorts 8000/);

    // A config that already lists the port is used as it is.
    created.length = 0;
    await ensureInstance(
      { name: "review", config: "sandbox.yaml", hostPort: 5432, configDir, callAction: controller() },
      { cwd: dir },
      () => undefined,
    );
    expect(created).toEqual([{ action: "create", name: "review", config: "sandbox.yaml" }]);
  });

  test("an existing instance must already list the port", async () => {
    const ok = controller({ state: "running", hostPorts: [8000] });
    await ensureInstance({ name: "review", hostPort: 8000, configDir: dir, callAction: ok }, {}, () => undefined);
    const without = controller({ state: "running", hostPorts: [] });
    await expect(
      ensureInstance({ name: "review", hostPort: 8000, configDir: dir, callAction: without }, {}, () => undefined),
    ).rejects.toMatchObject({
      code: "REVIEW_SETUP_HOST_PORT_MISSING",
      message: "instance review cannot reach host port 8000 (its network.hostPorts: none)",
      hint: expect.stringMatching(/fixed when an instance is created.*--model-server, which adds the port/),
    });
  });
});

test("a refresh with --model-server seeds models.json, installs the extension, checks the guest's reach, and launches a served model", async () => {
  const guest = new FakeGuest();
  const events: StepEvent[] = [];
  const result = await runReviewSetup({
    name: "review",
    repo,
    guest,
    callAction: async () => ({ state: "running", hostPorts: [fake.port] }),
    lockDir: dir,
    modelServer: parseModelServer(`http://127.0.0.1:${fake.port}`),
    onProgress: (e) => events.push(e),
  });
  expect(result).toMatchObject({
    mode: "local-model-server",
    modelServer: {
      ids: ["qwen3-8b", "gemma-3-12b"],
      model: "qwen3-8b",
      guestUrl: `http://host.sandbox.internal:${fake.port}/v1`,
    },
    launchCommand:
      "cd /workspace/.review/current && PI_CODING_AGENT_DIR=/workspace/.review/agent node_modules/.bin/pi -e ./packages/pi-extension --model local/qwen3-8b",
  });
  const done = events.filter((e) => e.status === "done").map((e) => e.step);
  expect(done[0]).toBe("model-server");
  expect(done.slice(-2)).toEqual(["agent", "local-models"]);
  expect(events.find((e) => e.step === "credentials")?.message).toContain("the host's model server needs none");
  expect(guest.files.get("/workspace/.review/agent/extensions/local-models.ts")).toBe(
    await readFile(LOCAL_MODELS_EXTENSION, "utf8"),
  );
  // The provider goes through a file and is merged in the guest (other providers are kept there).
  expect(JSON.parse(guest.files.get("/workspace/.review/agent/.local-provider.json")!)).toEqual({
    name: `Model server (host 127.0.0.1:${fake.port})`,
    baseUrl: `http://host.sandbox.internal:${fake.port}/v1`,
    api: "openai-completions",
    apiKey: "local",
    models: [{ id: "qwen3-8b" }, { id: "gemma-3-12b" }],
  });
  expect(
    guest.commands.some((c) => c.startsWith("node -e") && c.includes("/workspace/.review/agent/models.json")),
  ).toBe(true);
  expect(guest.commands.at(-1)).toContain(`http://host.sandbox.internal:${fake.port}/v1/models`);
});

test("a guest that cannot reach the server fails the refresh with both URLs", async () => {
  const guest = new FakeGuest({ failing: { "AbortSignal.timeout(10000)": 4 } });
  await expect(
    runReviewSetup({
      name: "review",
      repo,
      guest,
      callAction: async () => ({ state: "running", hostPorts: [fake.port] }),
      lockDir: dir,
      modelServer: parseModelServer(`http://127.0.0.1:${fake.port}`),
    }),
  ).rejects.toMatchObject({
    code: "REVIEW_SETUP_MODEL_SERVER_UNREACHABLE",
    message: expect.stringMatching(
      new RegExp(
        `^the guest cannot reach the model server at http://host\\.sandbox\\.internal:${fake.port}/v1/models .*host reached http://127\\.0\\.0\\.1:${fake.port}/v1/models$`,
      ),
    ),
  });
});

test("a guest models.json that cannot be merged fails the local-models step", async () => {
  const guest = new FakeGuest({ failing: { "AbortSignal.timeout(10000)": 3 } });
  await expect(
    runReviewSetup({
      name: "review",
      repo,
      guest,
      callAction: async () => ({ state: "running", hostPorts: [fake.port] }),
      lockDir: dir,
      modelServer: parseModelServer(`http://127.0.0.1:${fake.port}`),
    }),
  ).rejects.toMatchObject({ code: "REVIEW_SETUP_STEP_FAILED", details: { step: "local-models" } });
});

test("an unreachable server stops the refresh before any guest work", async () => {
  const guest = new FakeGuest();
  const port = await deadPort();
  const calls: unknown[] = [];
  await expect(
    runReviewSetup({
      name: "review",
      repo,
      guest,
      callAction: async (input) => (calls.push(input), { state: "running", hostPorts: [port] }),
      lockDir: dir,
      modelServer: parseModelServer(`http://127.0.0.1:${port}`),
    }),
  ).rejects.toMatchObject({ code: "REVIEW_SETUP_MODEL_SERVER_UNREACHABLE" });
  expect(calls).toEqual([]);
  expect(guest.commands).toEqual([]);
});

describe("--model-server-key: the key stays on the host", () => {
  const KEY = "sk-model-server-key-never-in-the-guest";
  let keyed: FakeModelServer;
  beforeAll(async () => {
    keyed = await startFakeModelServer(["qwen3-8b"]);
    keyed.key = KEY;
  });
  afterAll(() => keyed.close());

  test("it names where the host reads the key: env:VAR, or file:PATH made absolute (~/ kept); never the key", () => {
    const parsed = (key: string) =>
      parseCommandLine(["--name", "r", "--model-server", "http://127.0.0.1:8000", "--model-server-key", key]);
    expect(parsed("env:OMLX_API_KEY")).toMatchObject({ modelServer: { port: 8000, key: "env:OMLX_API_KEY" } });
    expect(parseModelServerKey("file:keys/omlx", "/home/me")).toBe("file:/home/me/keys/omlx");
    expect(parseModelServerKey("file:~/.config/omlx/key")).toBe("file:~/.config/omlx/key");
    let error: (Error & { code?: string; hint?: string }) | undefined;
    try {
      parsed(KEY);
    } catch (e) {
      error = e as typeof error;
    }
    expect(error).toMatchObject({ code: "REVIEW_SETUP_USAGE" });
    expect(`${error!.message} ${error!.hint}`).not.toContain(KEY);
    expect(() => parseCommandLine(["--name", "r", "--model-server-key", "env:K"])).toThrow(
      expect.objectContaining({ code: "REVIEW_SETUP_USAGE", message: "--model-server-key needs --model-server" }),
    );
  });

  test("the host's own request sends the key; a missing or wrong one says what to do", async () => {
    const server = { ...parseModelServer(`http://127.0.0.1:${keyed.port}`), key: "env:TEST_MODEL_KEY" };
    await expect(readServedModels(server, { env: { TEST_MODEL_KEY: KEY } })).resolves.toEqual({
      ids: ["qwen3-8b"],
      model: "qwen3-8b",
    });
    expect(keyed.seen.at(-1)).toMatchObject({ url: "/v1/models", keyed: true });
    await expect(readServedModels(server, { env: { TEST_MODEL_KEY: "wrong" } })).rejects.toMatchObject({
      code: "REVIEW_SETUP_MODEL_SERVER_REFUSED",
      hint: expect.stringContaining("env:TEST_MODEL_KEY holds the key"),
    });
    await expect(readServedModels(server, { env: {} })).rejects.toMatchObject({
      code: "REVIEW_SETUP_USAGE",
      message: "--model-server-key env:TEST_MODEL_KEY: TEST_MODEL_KEY is not set",
    });
    // Without a key, a server that wants one: the hint names the option.
    await expect(readServedModels(parseModelServer(`http://127.0.0.1:${keyed.port}`))).rejects.toMatchObject({
      code: "REVIEW_SETUP_MODEL_SERVER_REFUSED",
      hint: expect.stringContaining("--model-server-key env:VAR"),
    });
    const file = join(dir, "model-key");
    await writeFile(file, `${KEY}\n`, { mode: 0o600 });
    await expect(readServedModels({ ...server, key: `file:${file}` })).resolves.toMatchObject({ model: "qwen3-8b" });
  });

  test("--config: the instance gets a secret for the server's host port only, not an allowed host", async () => {
    const config = join(dir, "keyed.sandbox.yaml");
    await writeFile(config, "version: 1\nnetwork:\n  allowedHosts: [registry.npmjs.org]\n");
    const server = { ...parseModelServer("http://127.0.0.1:8000"), key: "env:OMLX_API_KEY" };
    const configDir = join(dir, "state-keyed");
    const created: unknown[] = [];
    await ensureInstance(
      {
        name: "keyed",
        config,
        hostPort: 8000,
        secrets: async () => modelServerSecret(server),
        configDir,
        callAction: async (input) => {
          if ((input as { action: string }).action === "inspect")
            throw new ControllerError("CONTROLLER_NOT_FOUND", "none");
          created.push(input);
          return { state: "running" };
        },
      },
      {},
      () => undefined,
    );
    const derived = await loadConfig(join(configDir, "keyed.sandbox.yaml"));
    expect(derived.network).toMatchObject({
      allowedHosts: ["registry.npmjs.org"],
      hostPorts: [8000],
      secrets: { MODEL_SERVER_KEY: { from: "env:OMLX_API_KEY", hosts: ["host.sandbox.internal:8000"] } },
    });
  });

  test("an existing instance must declare the secret for the server's port", () => {
    const server = { ...parseModelServer("http://127.0.0.1:8000"), key: "env:K" };
    const declared = { name: "MODEL_SERVER_KEY", hosts: ["host.sandbox.internal:8000"] };
    expect(() => requireModelServerSecret("r", { hostPorts: [8000], secrets: [declared] }, server)).not.toThrow();
    expect(() =>
      requireModelServerSecret(
        "r",
        { hostPorts: [8000], secrets: [{ ...declared, hosts: ["host.sandbox.internal"] }] },
        server,
      ),
    ).not.toThrow();
    expect(() => requireModelServerSecret("r", { hostPorts: [8000], secrets: [] }, server)).toThrow(
      expect.objectContaining({
        code: "REVIEW_SETUP_SECRET_MISSING",
        hint: expect.stringContaining("--model-server-key env:K"),
      }),
    );
    expect(() => requireModelServerSecret("r", { hostPorts: [8000] }, { ...server, key: undefined })).not.toThrow();
  });

  test("a refresh with a key: models.json names the placeholder's variable, never the key", async () => {
    const guest = new FakeGuest();
    const server = { ...parseModelServer(`http://127.0.0.1:${keyed.port}`), key: "env:TEST_MODEL_KEY" };
    await runReviewSetup({
      name: "review",
      repo,
      guest,
      hostEnv: { TEST_MODEL_KEY: KEY },
      callAction: async () => ({
        state: "running",
        hostPorts: [keyed.port],
        secrets: [{ name: "MODEL_SERVER_KEY", hosts: [`host.sandbox.internal:${keyed.port}`] }],
      }),
      lockDir: dir,
      modelServer: server,
    });
    expect(JSON.parse(guest.files.get("/workspace/.review/agent/.local-provider.json")!)).toMatchObject({
      apiKey: "$MODEL_SERVER_KEY",
    });
    expect(guest.commands.at(-1)).toMatch(/\/v1\/models MODEL_SERVER_KEY$/);
    for (const [, text] of guest.files) expect(String(text)).not.toContain(KEY);
    for (const command of guest.commands) expect(command).not.toContain(KEY);
  });
});
