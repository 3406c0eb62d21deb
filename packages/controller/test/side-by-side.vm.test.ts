// Two instances side by side in one state root found through $XDG_STATE_HOME, driven through the
// client as a user would: `app` (web + api, web's env holding api's public URL) for services,
// previews and the terminal; `hooks` (a failing setup, a resume hook longer than 10 s) for setup
// and resume outcomes, a killed daemon, and a reopen that keeps the guest logs.
import { spawn, type ChildProcess } from "node:child_process";
import { stat } from "node:fs/promises";
import { join } from "node:path";
import { callAction } from "../src/client/index.js";
import { fetchText, makeSandbox, qemuFor, qemuGone, teardown, type LooseResult, type Sandbox } from "../src/testing.js";

// One script for both services: api answers, web shows the API URL it was given.
const APP_PY = `import http.server, os, sys
role = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        body = ("api says hi\\n" if role == "api" else "web uses %s\\n" % os.environ["API_URL"]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = answer
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer()
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
`;

const APP_YAML = `profile: tiny
diskGiB: 4
setup:
  - |
    cat > /workspace/app.py <<'EOF'
${APP_PY.replace(/^/gm, "    ")}
    EOF
services:
  api:
    command: exec python3 app.py api
    health: /
    preview: true
  web:
    command: exec python3 app.py web
    env:
      API_URL: \${services.api.publicURL}
    health: /
    preview: true
`;

const HOOKS_YAML = `profile: tiny
diskGiB: 4
setup:
  - echo setup-was-here; exit 3
resume:
  - test -e /workspace/resumed || { sleep 14; echo done > /workspace/resumed; }
services:
  web:
    command: exec python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
`;

let sandbox: Sandbox;
let call: Sandbox["call"];
let hooksCreated: Promise<LooseResult>;

const urlOf = (view: LooseResult, service: string): string =>
  (view.previews as { service: string; url: string }[]).find((p) => p.service === service)!.url;

async function statuses(service?: string): Promise<Record<string, LooseResult>> {
  const result = await call({ action: "services", name: "app", op: "status", ...(service ? { service } : {}) });
  return Object.fromEntries((result.services as LooseResult[]).map((s) => [s.name, s]));
}

beforeAll(async () => {
  const base = await makeSandbox("psx-");
  // The state root comes from $XDG_STATE_HOME: no PI_SANDBOX_HOME.
  const { PI_SANDBOX_HOME: _unset, ...inherited } = base.env;
  const env = { ...inherited, XDG_STATE_HOME: join(base.dir, "xdg") };
  sandbox = {
    ...base,
    home: join(base.dir, "xdg", "pi-sandbox"),
    env,
    call: (action, options = {}) => callAction(action, { env, cwd: base.dir, ...options }) as Promise<LooseResult>,
  };
  call = sandbox.call;
  await sandbox.writeConfig(APP_YAML, "app.yaml");
  await sandbox.writeConfig(HOOKS_YAML, "hooks.yaml");
  const app = await call({ action: "create", name: "app", config: "app.yaml" });
  expect(app.state).toBe("running");
  // hooks boots while the app tests run.
  hooksCreated = call({ action: "create", name: "hooks", config: "hooks.yaml" });
  hooksCreated.catch(() => undefined);
});

afterAll(async () => {
  await hooksCreated?.catch(() => undefined);
  expect(await teardown(sandbox)).toEqual([]);
});

test("the state root is $PI_SANDBOX_HOME, else $XDG_STATE_HOME/pi-sandbox, else ~/.local/state/pi-sandbox", async () => {
  const { dir, env } = sandbox;
  const home = join(dir, "home");
  const list = (extra: Record<string, string>, drop: string[] = []) => {
    const e: NodeJS.ProcessEnv = { ...env, HOME: home, ...extra };
    for (const key of drop) delete e[key];
    return callAction({ action: "list" }, { env: e, cwd: dir }) as Promise<LooseResult>;
  };
  const names = (r: LooseResult) => (r.instances as { name: string }[]).map((i) => i.name);
  expect(names(await list({}))).toContain("app");
  expect(await list({ PI_SANDBOX_HOME: join(dir, "own") })).toMatchObject({ instances: [] });
  expect((await stat(join(dir, "own"))).mode & 0o777).toBe(0o700);
  expect(await list({}, ["XDG_STATE_HOME"])).toMatchObject({ instances: [] });
  expect((await stat(join(home, ".local", "state", "pi-sandbox"))).mode & 0o777).toBe(0o700);
  expect(qemuFor(join(sandbox.home, "runtime")).length).toBeGreaterThan(0);
});

test("services ensure, status, restart and stop act on one service when named, on all otherwise", async () => {
  const before = await statuses();
  expect(before.api).toMatchObject({ state: "running", readiness: { state: "ready" } });
  expect(before.web).toMatchObject({ state: "running", readiness: { state: "ready" } });
  expect(Object.keys(await statuses("web"))).toEqual(["web"]);

  const stopped = await call({ action: "services", name: "app", op: "stop", service: "web" });
  expect(stopped.stopped).toEqual(["web"]);
  let now = await statuses();
  expect(now.web!.state).toBe("stopped");
  expect(now.api).toMatchObject({ state: "running", pid: before.api!.pid });

  const ensured = await call({ action: "services", name: "app", op: "ensure", service: "web" });
  expect(ensured).toMatchObject({ started: ["web"], kept: [], failures: [] });
  now = await statuses();
  expect(now.web).toMatchObject({ state: "running", port: before.web!.port, readiness: { state: "ready" } });
  expect(now.api!.pid).toBe(before.api!.pid);

  const restarted = await call({ action: "services", name: "app", op: "restart", service: "api" });
  expect(restarted.started).toEqual(["api"]);
  const afterRestart = await statuses();
  expect(afterRestart.api!.pid).not.toBe(before.api!.pid);
  expect(afterRestart.api!.port).toBe(before.api!.port);
  expect(afterRestart.web!.pid).toBe(now.web!.pid);
  expect(urlOf(restarted, "api")).toBe(urlOf(ensured, "api"));

  for (const op of ["ensure", "status", "restart", "stop"]) {
    await expect(call({ action: "services", name: "app", op, service: "ghost" })).rejects.toMatchObject({
      code: "SERVICE_NOT_FOUND",
      hint: expect.stringContaining('"op":"status"'),
    });
  }

  const all = await call({ action: "services", name: "app", op: "stop" });
  expect([...all.stopped].sort()).toEqual(["api", "web"]);
  const back = await call({ action: "services", name: "app", op: "ensure" });
  expect(back).toMatchObject({ started: ["api", "web"], kept: [], failures: [] });
  const again = await call({ action: "services", name: "app", op: "restart" });
  expect([...again.started].sort()).toEqual(["api", "web"]);
  const last = await statuses();
  expect(last.api!.state).toBe("running");
  expect(last.web!.readiness.state).toBe("ready");
});

test("${services.api.publicURL}: web gets api's preview URL, and a request from web's page to it reaches api", async () => {
  const view = await call({ action: "inspect", name: "app" });
  const apiUrl = urlOf(view, "api");
  const webUrl = urlOf(view, "web");
  const apiOrigin = new URL(apiUrl).origin;
  expect(await fetchText(webUrl)).toBe(`200 web uses ${apiOrigin}\n`);
  // As web's page does in a browser: a POST from web's origin to api's public URL.
  const res = await fetch(apiOrigin, { method: "POST", body: "{}", headers: { Origin: new URL(webUrl).origin } });
  expect(`${res.status} ${await res.text()}`).toBe("200 api says hi\n");
});

test("a failing setup is reported and services start anyway; a resume hook past 10 s runs on in the background", async () => {
  const hooks = await hooksCreated;
  expect(hooks.state).toBe("running");
  expect(hooks.setup).toMatchObject({ exitCode: 3, logPath: expect.stringMatching(/setup-.*\.log$/) });
  expect(hooks.errors).toEqual([
    expect.objectContaining({ code: "CONTROLLER_SETUP_FAILED", hint: expect.stringContaining(hooks.setup.logPath) }),
  ]);
  expect(await fetchText(urlOf(hooks, "web"))).toMatch(/^200 /);
  const view = await call({ action: "inspect", name: "hooks" });
  expect(view.resumePid).toEqual(expect.any(String));
  const resume = await call({ action: "exec-status", name: "hooks", pid: view.resumePid, timeoutMs: 30_000 });
  expect(resume).toMatchObject({ running: false, exitCode: 0 });
  const marker = await call({ action: "exec", name: "hooks", cmd: "cat /workspace/resumed" });
  expect(marker.output).toBe("done\n");
});

test("an unsupervised server started by exec gets a preview that serves, keeps its host port across stop and start, and goes with destroy", async () => {
  const serve =
    "setsid nohup python3 -m http.server 8123 --bind 127.0.0.1 >/dev/null 2>&1 & " +
    "for i in $(seq 300); do curl -sf -o /dev/null http://127.0.0.1:8123/ && break; sleep 0.2; done; " +
    "curl -sf -o /dev/null http://127.0.0.1:8123/";
  const served = await call({
    action: "exec",
    name: "app",
    cmd: "echo by-exec > /workspace/plain.txt; " + serve,
    timeoutMs: 60_000,
  });
  expect(served).toMatchObject({ running: false, exitCode: 0 });
  const first = await call({ action: "preview", name: "app", port: 8123, title: "plain" });
  const url = first.previews[0].url as string;
  expect(await fetchText(`${url}plain.txt`)).toBe("200 by-exec\n");

  // A daemon that does not answer (SIGSTOP) reads unavailable; after SIGCONT it reads running.
  const { daemonPid } = await call({ action: "inspect", name: "app" });
  process.kill(daemonPid, "SIGSTOP");
  try {
    const paused = await call({ action: "inspect", name: "app" });
    expect(paused.state).toBe("unavailable");
    expect(paused.hint).toContain(String(daemonPid));
  } finally {
    process.kill(daemonPid, "SIGCONT");
  }
  expect((await call({ action: "inspect", name: "app" })).state).toBe("running");

  const before = await call({ action: "inspect", name: "app" });
  const setup = before.setup as LooseResult;
  expect(setup).toMatchObject({ exitCode: 0, logPath: expect.stringMatching(/setup-.*\.log$/) });
  expect(await fetchText(`${urlOf(before, "web")}before-reopen`)).toMatch(/^200 /);
  await call({ action: "stop", name: "app" });
  await expect(fetch(url)).rejects.toThrow();
  const started = await call({ action: "start", name: "app" });
  expect(await call({ action: "exec", name: "app", cmd: serve, timeoutMs: 60_000 })).toMatchObject({ exitCode: 0 });
  const again = await call({ action: "preview", name: "app", port: 8123 });
  expect(again.previews[0].url).toBe(url);
  expect(await fetchText(`${url}plain.txt`)).toBe("200 by-exec\n");

  // The reopen keeps the setup outcome, its log, and the service logs of the last boot.
  expect(started.setup).toEqual(setup);
  const setupLog = await call({ action: "exec", name: "app", cmd: `cat ${setup.logPath}` });
  expect(setupLog).toMatchObject({ exitCode: 0, output: expect.stringContaining("setup step 1/1") });
  const logs = await call({ action: "logs", name: "app", service: "web", lines: 500 });
  expect(logs.text).toContain("/before-reopen");
});

test("killing hooks' daemon leaves app's previews serving; start finishes its unsaved create; prepare with a failing setup publishes nothing", async () => {
  const hooks = await call({ action: "inspect", name: "hooks" });
  const hooksWeb = urlOf(hooks, "web");
  const app = await call({ action: "inspect", name: "app" });
  process.kill(hooks.daemonPid, "SIGKILL");
  expect(await qemuGone(join(sandbox.home, "instances", "hooks"), 10_000)).toEqual([]);
  expect((await call({ action: "inspect", name: "hooks" })).state).toBe("interrupted");
  expect(await fetchText(urlOf(app, "web"))).toMatch(/^200 web uses /);
  expect(await fetchText(urlOf(app, "api"))).toBe("200 api says hi\n");
  // A page of one instance may not post to another instance's preview.
  const cross = await fetch(urlOf(app, "api"), {
    method: "POST",
    body: "{}",
    headers: { Origin: new URL(hooksWeb).origin },
  });
  expect(cross.status).toBe(403);

  // Its run was never checkpointed, so start finishes the create again, setup included.
  const progress: string[] = [];
  const reopened = await call({ action: "start", name: "hooks" }, { onProgress: (e) => progress.push(e.message) });
  expect(progress).toContain("finishing the interrupted create of hooks");
  expect(reopened).toMatchObject({ state: "running", setup: { exitCode: 3 } });
  expect(await fetchText(urlOf(reopened, "web"))).toMatch(/^200 /);

  // prepare with the failing setup publishes no template.
  await expect(call({ action: "prepare", name: "broken-tpl", config: "hooks.yaml" })).rejects.toMatchObject({
    code: "CONTROLLER_SETUP_FAILED",
  });
  expect((await call({ action: "list", kind: "templates" })).templates).toEqual([]);
});

test("stop cuts an open terminal session; destroying a running instance closes all its previews", async () => {
  const shell = await call({ action: "shell", name: "hooks" }, { caller: "user" });
  const session: ChildProcess = spawn(
    "sh",
    ["-c", `${shell.command} -o BatchMode=yes -o ConnectTimeout=60 -o LogLevel=ERROR 'echo connected; sleep 600'`],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const exited = new Promise<number | null>((resolve) => session.once("exit", (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    session.stdout!.on("data", (chunk: Buffer) => {
      if (chunk.toString().includes("connected")) resolve();
    });
    session.once("exit", (code) => reject(new Error(`ssh exited before connecting (${code})`)));
  });
  await call({ action: "stop", name: "hooks" });
  let timer: NodeJS.Timeout | undefined;
  const code = await Promise.race([
    exited,
    new Promise<"still open">((resolve) => (timer = setTimeout(() => resolve("still open"), 30_000))),
  ]);
  clearTimeout(timer);
  if (code === "still open") session.kill("SIGKILL");
  expect(code).not.toBe("still open");
  expect(code).not.toBe(0);

  const view = await call({ action: "inspect", name: "app" });
  const urls = (view.previews as { url: string }[]).map((p) => p.url);
  expect(urls).toHaveLength(3); // api, web and the exec server's
  await call({ action: "destroy", name: "app", confirm: "app" });
  for (const url of urls) await expect(fetch(url)).rejects.toThrow();
  expect(await qemuGone(join(sandbox.home, "instances", "app"), 10_000)).toEqual([]);
  expect((await call({ action: "list" })).instances).toEqual([expect.objectContaining({ name: "hooks" })]);
});
