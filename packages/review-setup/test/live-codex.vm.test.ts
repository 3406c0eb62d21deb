// The seed's example on real VMs, first on an instance created the CLI's way (the `create` action,
// no `sandbox:setup --config`): `sandbox:setup --live-model openai-codex/gpt-6-sol --restart` with
// a ChatGPT (openai-codex) login on the host adds the secret to the instance and suspends and
// resumes it (a process started before keeps running, the same kernel boot). A fake ChatGPT backend on the host stands for
// https://chatgpt.com (this process's `dns.lookup` sends that name to 127.0.0.1; the controller
// runs in-process with it as an allowed internal host and the runtime's `upstream` seam, as in
// live-secrets.vm.test.ts). The guest's real Pi (1.6, from the fixture checkout) decodes the
// JWT-shaped placeholder, sends it, and the backend receives the real token and account id. A
// refreshed host token reaches the backend after a second refresh without a restart, the guest's
// auth.json carries the new expiry, the old placeholder still works, and after `stop` no byte of
// either token is anywhere in the state root. Before the second refresh the guest gets a fake
// `herdr` that records its arguments and writes an extension, which the live check's Pi loads.
// Then the seed's command as written, with `--config`, makes the instance itself and works at once.
import { createHash, randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import zlib from "node:zlib";
import { controllerGuest } from "../src/guest.js";
import { main } from "../src/main.js";
import type { ReviewSetupOptions } from "../src/refresh.js";
import { makePiRepo } from "./support/fixture.js";
import { startLiveHost, type LiveHost } from "./support/live-host.js";

const NAME = "review";
const API = "chatgpt.com";
const ACCOUNT = "acct-4f1c9e2a-review-setup-test";
const REFRESH = "host-refresh-token-never-leaves";
const AGENT = "/workspace/.review/agent";

/** A fake Herdr: records its arguments and agent dir, and writes an extension that leaves a marker when Pi loads it. */
const FAKE_HERDR = `#!/bin/sh
echo "$*|$PI_CODING_AGENT_DIR" >> /tmp/herdr-calls
mkdir -p "$PI_CODING_AGENT_DIR/extensions"
cat > "$PI_CODING_AGENT_DIR/extensions/herdr-agent-state.ts" <<'EOF'
import { writeFileSync } from "node:fs";
export default function () {
  writeFileSync("/tmp/herdr-extension-loaded", "loaded");
}
EOF
echo "installed the Pi integration"
`;

/** A ChatGPT-style access token: a JWT with the account id, plan and expiry, and a private e-mail. */
function chatgptToken(expSeconds: number): string {
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
  return [
    part({ alg: "RS256", kid: "test-key", typ: "JWT" }),
    part({
      exp: expSeconds,
      iat: expSeconds - 3600,
      jti: randomBytes(8).toString("hex"),
      "https://api.openai.com/auth": { chatgpt_account_id: ACCOUNT, chatgpt_plan_type: "pro" },
      "https://api.openai.com/profile": { email: "private@example.com" },
    }),
    randomBytes(256).toString("base64url"),
  ].join(".");
}

const EXP1 = Math.floor(Date.now() / 1000) + 3600;
const EXP2 = EXP1 + 1800;
const TOKEN = chatgptToken(EXP1);
const REFRESHED = chatgptToken(EXP2);

let dir: string;
let repo: string;
let host: LiveHost;
const call: LiveHost["call"] = (input, options) => host.call(input, options);
const act: LiveHost["act"] = (action) => host.act(action);
/** What the backend got: the bearer token and account id of each request (and WebSocket attempt). */
const received: { kind: string; token: string; account: string }[] = [];
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

async function login(access: string, expSeconds: number): Promise<void> {
  await mkdir(join(dir, "host-agent"), { recursive: true });
  await writeFile(
    join(dir, "host-agent", "auth.json"),
    JSON.stringify({
      "openai-codex": { type: "oauth", access, refresh: REFRESH, expires: expSeconds * 1000, accountId: ACCOUNT },
    }),
  );
}

const hash = (text: string) => createHash("sha256").update(text).digest("hex").slice(0, 12);

/** `sandbox:setup` as a user runs it (`main`), against the in-process controller. */
async function setup(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const started = Date.now();
  const overrides: Partial<ReviewSetupOptions> = {
    guest: controllerGuest(NAME, {}, call),
    callAction: call,
    hostEnv: { PI_CODING_AGENT_DIR: join(dir, "host-agent"), PATH: process.env.PATH },
    lockDir: join(dir, "review-setup"), // outside the state root, which is searched whole below
    installCommand: "true",
    buildCommand: "true",
  };
  const code = await main(["--name", NAME, "--repo", repo, "--pi-command", "node pi/dist/bundle/cli.js", ...args], {
    stdout: (text) => (stdout += text),
    stderr: (text) => {
      stderr += text;
      for (const line of text.split("\n"))
        if (/^\[[\w-]+\] ✓/.test(line)) timings.push(`  +${((Date.now() - started) / 1000).toFixed(0)} s ${line}`);
    },
    env: { ...process.env, PI_SANDBOX_HOME: host.layout.root },
    cwd: dir,
    overrides,
  });
  return { code, stdout, stderr };
}

/** Greps the guest's processes' environments and files for `secrets`: prints the count, then any file. */
const guestSecretSearch = (secrets: readonly string[]) => {
  const patterns = secrets.map((s) => `-e '${s}'`).join(" ");
  return (
    `cat /proc/[0-9]*/environ 2>/dev/null | grep -c ${patterns}; ` +
    `grep -rl ${patterns} /workspace /tmp /root /etc /home 2>/dev/null; true`
  );
};

/** Stops the instance, then expects no byte of `secrets` anywhere under the state root, and `placeholder` somewhere. */
async function expectStateClean(secrets: readonly string[], placeholder: string): Promise<void> {
  expect((await act({ action: "stop" })).state).toBe("stopped");
  // Every file under the state root: the disk's layers, records, logs, the derived config.
  const files = await host.searchState(secrets);
  for (const { path, found } of files) {
    expect({ path, found: found.map((s) => s.slice(0, 8)) }).toEqual({ path, found: [] });
  }
  expect(files.length).toBeGreaterThan(5);
  const placeholderFound = files.some((file) => file.bytes.includes(placeholder));
  expect(placeholderFound).toBe(true); // the search does see what the guest wrote to its disk
}

/** The Responses API stream Pi reads: one message with text, then the usage. */
function sse(text: string): string {
  const item = { id: "msg_1", type: "message", role: "assistant", status: "completed" };
  const events = [
    { type: "response.created", response: { id: "resp_1", status: "in_progress" } },
    { type: "response.output_item.added", output_index: 0, item: { ...item, content: [] } },
    { type: "response.output_text.delta", output_index: 0, content_index: 0, delta: text },
    {
      type: "response.output_item.done",
      output_index: 0,
      item: { ...item, content: [{ type: "output_text", text, annotations: [] }] },
    },
    {
      type: "response.completed",
      response: {
        id: "resp_1",
        status: "completed",
        usage: { input_tokens: 21, output_tokens: 2, total_tokens: 23 },
      },
    },
  ];
  return events.map((event) => `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`).join("");
}

beforeAll(async () => {
  const image = process.env.PI_SANDBOX_TEST_IMAGE;
  if (!image) throw new Error("PI_SANDBOX_TEST_IMAGE is not set: run through jest's globalSetup");
  dir = await mkdtemp(join(tmpdir(), "prc-"));
  repo = await makePiRepo();
  await writeFile(join(dir, "sandbox.yaml"), `version: 1\nimage: ${image}\nprofile: small\ndiskGiB: 4\n`);
  host = await startLiveHost({
    dir,
    name: NAME,
    api: API,
    handler: (req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (chunk: Buffer) => chunks.push(chunk));
      req.on("end", () => {
        const token = (req.headers.authorization ?? "").replace(/^Bearer /, "");
        received.push({ kind: `${req.method} ${req.url}`, token, account: String(req.headers["chatgpt-account-id"]) });
        if (token !== TOKEN && token !== REFRESHED) {
          res.writeHead(401, { "content-type": "application/json" }).end('{"error":{"message":"bad token"}}');
          return;
        }
        const raw = Buffer.concat(chunks);
        const body = req.headers["content-encoding"] === "zstd" ? zlib.zstdDecompressSync(raw) : raw;
        const model = (JSON.parse(body.toString("utf8") || "{}") as { model?: string }).model;
        res.writeHead(200, { "content-type": "text/event-stream" }).end(sse(`ready ${model} ${hash(token)}`));
      });
    },
    // Pi tries a WebSocket first; noting it and closing makes Pi fall back to the SSE request.
    onUpgrade: (req, socket) => {
      const token = (req.headers.authorization ?? "").replace(/^Bearer /, "");
      received.push({ kind: "websocket", token, account: String(req.headers["chatgpt-account-id"]) });
      socket.destroy();
    },
  });
});

afterAll(async () => {
  process.stderr.write(`live-codex VM timings (TCG):\n${timings.join("\n")}\n`);
  process.stderr.write(`live-codex backend requests: ${received.map((r) => r.kind).join(", ")}\n`);
  await act({ action: "stop" }).catch(() => undefined);
  host?.close();
  await rm(dir, { recursive: true, force: true });
  await rm(repo, { recursive: true, force: true });
});

const claims = (jwt: string) =>
  JSON.parse(Buffer.from(jwt.split(".")[1]!, "base64url").toString("utf8")) as Record<string, unknown>;

test("on an instance the CLI made, the guest's Pi sends a JWT-shaped placeholder and the ChatGPT backend receives the real token; a refreshed one needs no restart", async () => {
  await login(TOKEN, EXP1);
  const created = await timed("create (the CLI's action)", () =>
    act({ action: "create", config: join(dir, "sandbox.yaml") }),
  );
  expect(created.secrets ?? []).toEqual([]);
  const bootId = async () => (await act({ action: "exec", cmd: "cat /proc/sys/kernel/random/boot_id" })).output;
  const firstBoot = await bootId();
  const sleeper = (
    await act({ action: "exec", cmd: "setsid sleep 100000 </dev/null >/dev/null 2>&1 & echo $!" })
  ).output.trim();

  // Without --restart and with nobody to ask, the secret is added but the VM is not restarted.
  const refused = await setup(["--live-model", "openai-codex/gpt-6-sol"]);
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain("REVIEW_SETUP_RESTART_NEEDED");
  expect(refused.stderr).toContain(
    "added network.secrets OPENAI_CODEX_ACCESS_TOKEN to review (allowedHosts + chatgpt.com)",
  );
  const first = await setup(["--live-model", "openai-codex/gpt-6-sol", "--restart"]);
  if (first.code !== 0) throw new Error(`setup failed:\n${first.stderr}\nbackend saw ${JSON.stringify(received)}`);
  expect(first.stdout).toContain(`ready gpt-6-sol ${hash(TOKEN)}`);
  expect(first.stdout).toContain("review was suspended and resumed for the new secrets: its processes kept running.");
  expect(await bootId()).toBe(firstBoot); // resumed, not booted again
  expect((await act({ action: "exec", cmd: `kill -0 ${sleeper} && echo alive` })).output.trim()).toBe("alive");
  const posts = () => received.filter((r) => r.kind.startsWith("POST"));
  expect(posts().map((r) => [r.kind, r.token === TOKEN, r.account])).toEqual([
    ["POST /backend-api/codex/responses", true, ACCOUNT],
  ]);
  // A WebSocket attempt, if Pi's reached the host, carried the real token too (never a placeholder).
  for (const r of received.filter((r) => r.kind === "websocket")) expect(r.token).toBe(TOKEN);

  const view = await act({ action: "inspect" });
  expect(view.secrets).toEqual([{ name: "OPENAI_CODEX_ACCESS_TOKEN", hosts: [API] }]);
  const auth = JSON.parse((await act({ action: "read", path: `${AGENT}/auth.json` })).content);
  const placeholder = auth["openai-codex"].access as string;
  expect(auth).toEqual({
    "openai-codex": {
      type: "oauth",
      access: expect.stringMatching(/^[\w-]+\.[\w-]+\.[\w-]+$/),
      refresh: "kept-on-the-host-by-review-setup",
      expires: EXP1 * 1000,
    },
  });
  expect(claims(placeholder)).toMatchObject({
    exp: EXP1,
    "https://api.openai.com/auth": { chatgpt_account_id: ACCOUNT, chatgpt_plan_type: "pro" },
  });
  expect(placeholder.split(".")[2]).not.toBe(TOKEN.split(".")[2]);

  // The host's login was refreshed (a new token, a later expiry): the next refresh pushes both.
  const booted = await bootId();
  await login(REFRESHED, EXP2);
  await act({ action: "write", path: "/usr/local/bin/herdr", content: FAKE_HERDR });
  await act({
    action: "exec",
    cmd: "chmod 755 /usr/local/bin/herdr; rm -f /tmp/herdr-calls /tmp/herdr-extension-loaded",
  });
  const second = await setup(["--live-model", "openai-codex/gpt-6-sol"]);
  if (second.code !== 0) throw new Error(`second setup failed:\n${second.stderr}`);
  // Herdr: the refresh ran `herdr integration install pi` for the agent dir; the live check's Pi loaded it.
  expect(second.stdout).toContain("Herdr found: its Pi integration is installed in the agent directory.");
  const herdr = await act({ action: "exec", cmd: "cat /tmp/herdr-calls; cat /tmp/herdr-extension-loaded" });
  expect(herdr.output).toBe(`integration install pi|${AGENT}\nloaded`);
  expect(second.stdout).toContain(`ready gpt-6-sol ${hash(REFRESHED)}`);
  expect(posts().at(-1)).toMatchObject({ account: ACCOUNT });
  expect(posts().at(-1)!.token === REFRESHED).toBe(true);
  expect(await bootId()).toBe(booted);
  const rewritten = JSON.parse((await act({ action: "read", path: `${AGENT}/auth.json` })).content);
  const newPlaceholder = rewritten["openai-codex"].access as string;
  expect(claims(newPlaceholder).exp).toBe(EXP2);
  expect(rewritten["openai-codex"].expires).toBe(EXP2 * 1000);
  // A process that read the old placeholder still gets the refreshed token in.
  const curl = await act({
    action: "exec",
    cmd: `curl -s -o /dev/null -w '%{http_code}' -X POST -H 'authorization: Bearer ${placeholder}' https://${API}/backend-api/codex/responses -d '{}'`,
  });
  expect(curl.output).toBe("200");
  expect(posts().at(-1)!.token === REFRESHED).toBe(true);

  const secrets = [TOKEN, REFRESHED, TOKEN.split(".")[2]!, REFRESHED.split(".")[2]!, REFRESH, "private@example.com"];
  expect((await act({ action: "exec", cmd: guestSecretSearch(secrets) })).output).toBe("0\n");
  await expectStateClean(secrets, newPlaceholder);
});

test("the seed's command as written (--config) creates the instance with the secret and the live check passes at once", async () => {
  await act({ action: "destroy", confirm: NAME }).catch(() => undefined);
  await login(TOKEN, EXP1);
  const before = received.length;
  const result = await timed("setup --config (create included)", () =>
    setup(["--config", join(dir, "sandbox.yaml"), "--live-model", "openai-codex/gpt-6-sol"]),
  );
  if (result.code !== 0) throw new Error(`setup --config failed:\n${result.stderr}`);
  expect(result.stdout).toContain(`ready gpt-6-sol ${hash(TOKEN)}`);
  expect(result.stdout).not.toContain("suspended and resumed"); // declared at create: nothing to restart
  const posts = received.slice(before).filter((r) => r.kind.startsWith("POST"));
  expect(posts.map((r) => [r.kind, r.token === TOKEN, r.account])).toEqual([
    ["POST /backend-api/codex/responses", true, ACCOUNT],
  ]);
  expect((await act({ action: "inspect" })).secrets).toEqual([{ name: "OPENAI_CODEX_ACCESS_TOKEN", hosts: [API] }]);
  const auth = JSON.parse((await act({ action: "read", path: `${AGENT}/auth.json` })).content);
  const placeholder = auth["openai-codex"].access as string;
  expect(claims(placeholder)).toMatchObject({ exp: EXP1 });
  expect(placeholder).not.toBe(TOKEN);

  const secrets = [TOKEN, TOKEN.split(".")[2]!, REFRESH, "private@example.com"];
  expect((await act({ action: "exec", cmd: guestSecretSearch(secrets) })).output).toBe("0\n");
  await expectStateClean(secrets, placeholder);
});
