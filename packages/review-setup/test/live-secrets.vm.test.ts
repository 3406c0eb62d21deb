// Live mode with the credential kept on the host, on one real VM: a host-side fake provider stands
// for https://api.anthropic.com (this process's `dns.lookup` sends that name to 127.0.0.1, and the
// controller runs in-process with that name as an allowed internal host and the runtime's
// `upstream` seam, which trusts the fake's self-signed certificate and dials its port for the
// guest's HTTPS to port 443, the way the vm package's secrets test reaches its fake API). The
// guest's Node (the stand-in for Pi) and curl reach it through Gondolin's MITM CA, which they must
// trust as they find it (no -k, no NODE_TLS_REJECT_UNAUTHORIZED). The host has a Claude
// Pro/Max-style OAuth login; the guest's stand-in for Pi sends what its auth.json holds, and the
// fake provider must receive the real token. Then a rotated token reaches it after a second
// refresh, without a restart, and after a stop no byte of either token is anywhere in the state
// root (disk layers included).
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { controllerGuest } from "../src/guest.js";
import { runReviewSetup, type ReviewSetupOptions } from "../src/refresh.js";
import { makeFixtureRepo } from "./support/fixture.js";
import { startLiveHost, type LiveHost } from "./support/live-host.js";

const NAME = "live";
const API = "api.anthropic.com";
const TOKEN = `sk-ant-oat01-host-only-${Date.now()}`;
const ROTATED = `sk-ant-oat01-rotated-${Date.now()}`;
const REFRESH = "host-refresh-token-never-leaves";

let dir: string;
let repo: string;
let host: LiveHost;
const received: string[] = [];
const call: LiveHost["call"] = (input, options) => host.call(input, options);
const act: LiveHost["act"] = (action) => host.act(action);

async function login(access: string): Promise<void> {
  await mkdir(join(dir, "host-agent"), { recursive: true });
  const expires = Date.now() + 3_600_000;
  await writeFile(
    join(dir, "host-agent", "auth.json"),
    JSON.stringify({ anthropic: { type: "oauth", access, refresh: REFRESH, expires } }),
  );
}

function options(extra: Partial<ReviewSetupOptions> = {}): ReviewSetupOptions {
  return {
    name: NAME,
    repo,
    liveModel: { provider: "anthropic", model: "claude-fake" },
    piCommand: `FAKE_URL=https://${API} node launch.js`,
    controller: { cwd: dir },
    guest: controllerGuest(NAME, {}, call),
    callAction: call,
    hostEnv: { PI_CODING_AGENT_DIR: join(dir, "host-agent"), PATH: process.env.PATH },
    lockDir: join(dir, "review-setup"), // outside the state root, which is searched whole below
    ...extra,
  };
}

const hash = (text: string) => createHash("sha256").update(text).digest("hex").slice(0, 12);

beforeAll(async () => {
  const image = process.env.PI_SANDBOX_TEST_IMAGE;
  if (!image) throw new Error("PI_SANDBOX_TEST_IMAGE is not set: run through jest's globalSetup");
  dir = await mkdtemp(join(tmpdir(), "prl-"));
  repo = await makeFixtureRepo();
  await writeFile(join(dir, "sandbox.yaml"), `version: 1\nimage: ${image}\nprofile: tiny\ndiskGiB: 4\n`);
  host = await startLiveHost({
    dir,
    name: NAME,
    api: API,
    handler: (req, res) => {
      req.resume();
      req.on("end", () => {
        const token = (req.headers.authorization ?? "").replace(/^Bearer /, "");
        received.push(token);
        const body = JSON.stringify({
          choices: [{ message: { role: "assistant", content: `ready ${hash(token)}` } }],
          usage: { prompt_tokens: 11, completion_tokens: 2, total_tokens: 13 },
        });
        res.writeHead(token ? 200 : 401, { "content-type": "application/json" }).end(body);
      });
    },
  });
});

afterAll(async () => {
  await act({ action: "stop" }).catch(() => undefined);
  host?.close();
  await rm(dir, { recursive: true, force: true });
  await rm(repo, { recursive: true, force: true });
});

test("the token stays on the host, the guest holds a placeholder, a rotated token needs no restart", async () => {
  await login(TOKEN);
  const first = await runReviewSetup(options({ config: join(dir, "sandbox.yaml") }));
  expect(first.mode).toBe("live-ready");
  expect(first.live?.response).toBe(`ready ${hash(TOKEN)}`);
  expect(received).toEqual([TOKEN]); // the fake provider got the real token

  const view = await act({ action: "inspect" });
  expect(view.secrets).toEqual([
    { name: "ANTHROPIC_API_KEY", hosts: [API] },
    { name: "ANTHROPIC_OAUTH_TOKEN", hosts: [API] },
  ]);
  const auth = JSON.parse((await act({ action: "read", path: "/workspace/.review/agent/auth.json" })).content);
  const placeholder = auth.anthropic.key as string;
  expect(auth).toEqual({
    anthropic: { type: "api_key", key: expect.stringMatching(/^sk-ant-oat01-PI_SANDBOX_SECRET_[0-9a-f]{40}$/) },
  });
  const env = await act({ action: "exec", cmd: 'printf %s "$ANTHROPIC_OAUTH_TOKEN"' });
  expect(env.output).toBe(placeholder);

  // A rotated token: the next refresh pushes it into the running VM (same boot: no restart).
  const bootId = async () => (await act({ action: "exec", cmd: "cat /proc/sys/kernel/random/boot_id" })).output;
  const booted = await bootId();
  await login(ROTATED);
  const second = await runReviewSetup(options());
  expect(second.live?.response).toBe(`ready ${hash(ROTATED)}`);
  expect(received).toEqual([TOKEN, ROTATED]);
  expect(await bootId()).toBe(booted);
  // The old token is no longer put in: a request with the placeholder now carries the new one.
  const curl = await act({
    action: "exec",
    cmd: `curl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer $ANTHROPIC_OAUTH_TOKEN" https://${API}/`,
  });
  expect(curl.output).toBe("200");
  expect(received.at(-1)).toBe(ROTATED);

  const guestSearch = await act({
    action: "exec",
    cmd: `cat /proc/[0-9]*/environ 2>/dev/null | grep -c -e ${TOKEN} -e ${ROTATED}; grep -rl -e ${TOKEN} -e ${ROTATED} -e ${REFRESH} /workspace /tmp /root /etc /home 2>/dev/null; true`,
  });
  expect(guestSearch.output).toBe("0\n");
  expect((await act({ action: "stop" })).state).toBe("stopped");

  // Every file under the state root: the disk's layers, records, logs, the derived config.
  const files = await host.searchState([TOKEN, ROTATED, REFRESH]);
  for (const { path, found } of files) expect({ path, found }).toEqual({ path, found: [] });
  expect(files.length).toBeGreaterThan(5);
  const placeholderFound = files.some((file) => file.bytes.includes(placeholder));
  expect(placeholderFound).toBe(true); // the search does see what the guest wrote to its disk
});
