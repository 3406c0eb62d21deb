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
import dns from "node:dns";
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import https from "node:https";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  StateLayout,
  callAction,
  findAction,
  validateAction,
  type CallActionOptions,
} from "@pi-sandbox/controller/client";
import { InstanceController, createFileLogger, createVmRuntime, selfSignedCert } from "@pi-sandbox/controller/testing";
import { controllerGuest } from "../src/guest.js";
import { runReviewSetup, type ReviewSetupOptions } from "../src/refresh.js";
import { makeFixtureRepo } from "./fixture.js";

const NAME = "live";
const API = "api.anthropic.com";
const TOKEN = `sk-ant-oat01-host-only-${Date.now()}`;
const ROTATED = `sk-ant-oat01-rotated-${Date.now()}`;
const REFRESH = "host-refresh-token-never-leaves";
const originalLookup = dns.lookup;

let dir: string;
let repo: string;
let layout: StateLayout;
let controller: InstanceController;
let ping: net.Server;
let server: https.Server;
let port: number;
const received: string[] = [];

function fakeLookup(hostname: string, options: unknown, callback?: (...args: unknown[]) => void): void {
  if (hostname !== API) {
    (originalLookup as (...args: unknown[]) => void)(hostname, options, callback);
    return;
  }
  const done = (typeof options === "function" ? options : callback) as (...args: unknown[]) => void;
  const all = typeof options === "object" && options !== null && (options as { all?: boolean }).all === true;
  if (all) process.nextTick(done, null, [{ address: "127.0.0.1", family: 4 }]);
  else process.nextTick(done, null, "127.0.0.1", 4);
}

/**
 * Local actions (inspect) through the client, which reads the state root; every other action to the
 * in-process controller, validated as the daemon validates it.
 */
async function call(input: unknown, options?: CallActionOptions): Promise<unknown> {
  const { args } = validateAction(input);
  if (findAction(args.action)?.route === "local") {
    return callAction(input, { ...options, env: { ...process.env, PI_SANDBOX_HOME: layout.root }, cwd: dir });
  }
  return controller.call(args, {
    progress: (event) => options?.onProgress?.(event),
    ...(options?.signal ? { signal: options.signal } : {}),
  });
}
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- results are loose JSON in tests
const act = (action: Record<string, unknown>) => call({ name: NAME, ...action }) as Promise<any>;

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
  const tls = selfSignedCert([API]);
  server = https.createServer(tls, (req, res) => {
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
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as net.AddressInfo).port;
  (dns as { lookup: unknown }).lookup = fakeLookup;

  layout = new StateLayout(join(dir, "state"));
  await layout.ensurePrivate();
  await mkdir(layout.entryDir("instances", NAME), { recursive: true, mode: 0o700 });
  // inspect judges the daemon live by its pid file and a socket that answers pings.
  await writeFile(layout.pidFile("instances", NAME), `${process.pid}\n`);
  ping = net.createServer((socket) => {
    socket.on("data", (chunk) => {
      for (const line of chunk.toString().split("\n").filter(Boolean)) {
        const message = JSON.parse(line) as { id: number };
        socket.write(`${JSON.stringify({ id: message.id, type: "pong", pid: process.pid, state: "running" })}\n`);
      }
    });
    socket.on("error", () => undefined);
  });
  await new Promise<void>((resolve) => ping.listen(layout.socketPath("instances", NAME), resolve));
  controller = new InstanceController(
    layout,
    "instances",
    NAME,
    createFileLogger(layout.logFile("instances", NAME), `[${NAME}]`),
    createVmRuntime({
      stateRoot: layout.runtimeDir(),
      allowedInternalHosts: [API],
      upstream: { ca: tls.cert, httpsPort: port },
    }),
  );
});

afterAll(async () => {
  await act({ action: "stop" }).catch(() => undefined);
  (dns as { lookup: unknown }).lookup = originalLookup;
  server?.close();
  ping?.close();
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
  const files = (await readdir(layout.root, { recursive: true, withFileTypes: true })).filter((f) => f.isFile());
  let searched = 0;
  let placeholderFound = false;
  for (const file of files) {
    const bytes = await readFile(join(file.parentPath, file.name)).catch(() => undefined);
    if (!bytes) continue;
    searched++;
    const path = join(file.parentPath, file.name);
    expect({
      path,
      token: bytes.includes(TOKEN),
      rotated: bytes.includes(ROTATED),
      refresh: bytes.includes(REFRESH),
    }).toEqual({ path, token: false, rotated: false, refresh: false });
    placeholderFound ||= bytes.includes(placeholder);
  }
  expect(searched).toBeGreaterThan(5);
  expect(placeholderFound).toBe(true); // the search does see what the guest wrote to its disk
});
