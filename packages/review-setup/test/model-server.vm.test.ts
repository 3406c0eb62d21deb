// --model-server on one real VM: a fake OpenAI-compatible model server on the host's 127.0.0.1,
// `sandbox:setup --config … --model-server` as a user runs it, then the guest's real Pi (1.6, the
// version this checkout locks) answers a prompt through the host's server and lists a model the
// server gained after setup. The server wants an API key (--model-server-key env:…): the host's
// proxy puts it in, and the guest holds only a placeholder. Pi comes in the fixture checkout as
// its self-contained bundle plus jiti (which Pi loads extensions with), so the candidate needs no
// registry and no install.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction } from "@pi-sandbox/controller/client";
import { main } from "../src/main.js";
import { controllerGuest, type GuestSession } from "../src/guest.js";
import { lastUserText, startFakeModelServer, type FakeModelServer } from "./support/fake-model-server.js";
import { makePiRepo } from "./support/fixture.js";

const NAME = "local-models";
/** The model server's API key: in the host environment only. */
const KEY = "sk-local-server-key-stays-on-the-host";
const AGENT = "/workspace/.review/agent";
let dir: string;
let repo: string;
let env: NodeJS.ProcessEnv;
let fake: FakeModelServer;
let guest: GuestSession;
let launch: string;
const timings: string[] = [];

/** Runs `work`, noting how long it took under `label` (printed after the suite). */
async function timed<T>(label: string, work: () => Promise<T>): Promise<T> {
  const started = Date.now();
  try {
    return await work();
  } finally {
    timings.push(`  ${label}: ${((Date.now() - started) / 1000).toFixed(0)} s`);
  }
}

const call = (action: Record<string, unknown>) =>
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- results are loose JSON in tests
  callAction({ name: NAME, ...action }, { env, cwd: dir }) as Promise<any>;

beforeAll(async () => {
  const image = process.env.PI_SANDBOX_TEST_IMAGE;
  if (!image) throw new Error("PI_SANDBOX_TEST_IMAGE is not set: run through jest's globalSetup");
  dir = await mkdtemp(join(tmpdir(), "prl-"));
  repo = await makePiRepo();
  env = { ...process.env, PI_SANDBOX_HOME: join(dir, "state"), PISB_TEST_MODEL_KEY: KEY };
  // No outbound hosts at all: the guest reaches the model server through network.hostPorts only.
  await writeFile(join(dir, "sandbox.yaml"), `version: 1\nimage: ${image}\nprofile: small\n`);
  fake = await startFakeModelServer(["model-a"]);
  fake.key = KEY;
  guest = controllerGuest(NAME, { env, cwd: dir });
});

afterAll(async () => {
  process.stderr.write(`model-server VM timings (TCG):\n${timings.join("\n")}\n`);
  await call({ action: "destroy", confirm: NAME }).catch(() => undefined);
  await fake?.close();
  await rm(dir, { recursive: true, force: true });
  await rm(repo, { recursive: true, force: true });
});

test("sandbox:setup --config --model-server --model-server-key opens the server's port to the instance and seeds the guest's Pi", async () => {
  let stdout = "";
  let stderr = "";
  const started = Date.now();
  const code = await timed("create + setup", () =>
    main(
      [
        ...["--name", NAME, "--config", "sandbox.yaml", "--repo", repo],
        ...["--model-server", `http://127.0.0.1:${fake.port}`, "--model-server-key", "env:PISB_TEST_MODEL_KEY"],
        ...["--pi-command", "node pi/dist/bundle/cli.js"],
      ],
      {
        stdout: (text) => (stdout += text),
        stderr: (text) => {
          stderr += text;
          for (const line of text.split("\n"))
            if (/^\[[\w-]+\] ✓/.test(line))
              timings.push(`    +${((Date.now() - started) / 1000).toFixed(0)} s ${line}`);
        },
        env,
        cwd: dir,
        // The fixture has nothing to install or build, and npm's own start costs seconds under TCG.
        overrides: { installCommand: "true", buildCommand: "true" },
      },
    ),
  );
  if (code !== 0) throw new Error(`setup failed:\n${stderr}`);
  expect(stderr).toContain(`[model-server] ✓ 1 model(s): model-a`);
  expect(stderr).toContain("[local-models] ✓ models.json seeded with 1 model(s); the guest reached the server");
  expect(stdout).toContain(`on the host's model server.`);
  launch = stdout
    .split("\n")
    .map((line) => line.trim())
    .find((line) => line.startsWith("cd /workspace/.review/current"))!;
  expect(launch).toBe(
    `cd /workspace/.review/current && PI_CODING_AGENT_DIR=${AGENT} node pi/dist/bundle/cli.js --model local/model-a`,
  );
  expect((await call({ action: "inspect" })).hostPorts).toEqual([fake.port]);
  // The host read the list, then the guest did, through host.sandbox.internal; both with the key.
  expect(fake.seen.map((r) => `${r.method} ${r.url} ${r.keyed}`)).toEqual([
    "GET /v1/models true",
    "GET /v1/models true",
  ]);
  const models = JSON.parse(await guest.read(`${AGENT}/models.json`));
  expect(models.providers.local).toMatchObject({
    baseUrl: `http://host.sandbox.internal:${fake.port}/v1`,
    apiKey: "$MODEL_SERVER_KEY",
    models: [{ id: "model-a" }],
  });
  // The guest has the placeholder, and the key nowhere: not in any environment or agent file.
  const look = await guest.exec(
    `printf '%s\\n' "$MODEL_SERVER_KEY"; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c -F ${KEY} || true; ` +
      `grep -r -l -F ${KEY} ${AGENT} /workspace/.review/current 2>/dev/null | wc -l`,
  );
  expect(look.output.trim().split("\n")).toEqual([expect.stringMatching(/^PI_SANDBOX_SECRET_[0-9a-f]{40}$/), "0", "0"]);
});

test("the launch command's Pi answers a -p prompt through the host's server", async () => {
  fake.seen.length = 0;
  const run = await timed("pi -p", () =>
    guest.exec(`export PI_SKIP_VERSION_CHECK=1; ${launch} --no-session -p 'hello from the guest'`, {
      deadlineMs: 180_000,
    }),
  );
  expect(run.output.trim().split("\n").at(-1)).toBe("served by model-a: hello from the guest");
  expect(run.exitCode).toBe(0);
  // The session start read the list again; then the prompt went to the server, with the key.
  expect(fake.seen.map((r) => `${r.method} ${r.url} ${r.keyed}`)).toEqual([
    "GET /v1/models true",
    "POST /v1/chat/completions true",
  ]);
  expect(fake.seen[1]!.model).toBe("model-a");
  expect(lastUserText(fake.seen[1]!.messages)).toBe("hello from the guest");
});

test("a model the server gains after setup shows in the guest Pi's model list", async () => {
  fake.models.push("model-b");
  await guest.write("/tmp/rpc-in.jsonl", '{"id":"m","type":"get_available_models"}\n');
  const run = await timed("pi --mode rpc", () =>
    guest.exec(`export PI_SKIP_VERSION_CHECK=1; ${launch} --no-session --mode rpc < /tmp/rpc-in.jsonl`, {
      deadlineMs: 180_000,
    }),
  );
  expect(run.exitCode).toBe(0);
  const reply = run.output
    .split("\n")
    .filter((line) => line.startsWith('{"id":"m"'))
    .map((line) => JSON.parse(line))[0];
  const local = (reply?.data?.models ?? []).filter((m: { provider: string }) => m.provider === "local");
  expect(local.map((m: { id: string; baseUrl: string }) => `${m.id} ${m.baseUrl}`)).toEqual([
    `model-a http://host.sandbox.internal:${fake.port}/v1`,
    `model-b http://host.sandbox.internal:${fake.port}/v1`,
  ]);
});
