// Two instances' services, previews and hooks as the daemon runs them, without QEMU: the daemon's
// InstanceController in-process over the local runtime (host processes, the real Python agent,
// real preview listeners). `app` (web + api, web's env holding api's public URL) for services
// ops, previews and an ad-hoc preview across stop and start; `hooks` (a failing setup, a resume
// hook longer than 10 s) for setup and resume outcomes. side-by-side.vm.test.ts keeps what needs
// real daemons and guests: a killed daemon, the terminal, the state root.
import { writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import { inspectEntry } from "../src/state/inspect.js";
import { fetchText, type LooseResult } from "../src/testing.js";
import { localSandbox, type LocalSandbox, type Loose } from "./support/local-daemon.js";
import { twoServicesYaml } from "./support/two-services.js";

const APP_YAML = `version: 1\n${twoServicesYaml("app.py")}`;

const HOOKS_YAML = `version: 1
profile: tiny
diskGiB: 4
setup:
  - echo setup-was-here; exit 3
resume:
  - test -e resumed || { sleep 14; echo done > resumed; }
services:
  web:
    command: exec python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
`;

let sandbox: LocalSandbox;
let call: (action: Loose) => Promise<Loose>;

const urlOf = (view: LooseResult, service: string): string =>
  (view.previews as { service: string; url: string }[]).find((p) => p.service === service)!.url;

async function statuses(service?: string): Promise<Record<string, LooseResult>> {
  const result = await call({ action: "services", name: "app", op: "status", ...(service ? { service } : {}) });
  return Object.fromEntries((result.services as LooseResult[]).map((s) => [s.name, s]));
}

/** A localhost port free now (the local "guest" shares the host's). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

beforeEach(async () => {
  sandbox = await localSandbox("pisb-sbs-", APP_YAML);
  await writeFile(join(sandbox.dir, "hooks.yaml"), HOOKS_YAML);
  call = (action) => sandbox.daemons.call(action);
});

afterEach(() => sandbox.close());

const createApp = async () => {
  const app = await call({ action: "create", name: "app", config: join(sandbox.dir, "sandbox.yaml") });
  expect(app.state).toBe("running");
  return app;
};

test("services ensure, status, restart and stop act on one service when named, on all otherwise", async () => {
  await createApp();
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
  const view = await createApp();
  const apiUrl = urlOf(view, "api");
  const webUrl = urlOf(view, "web");
  const apiOrigin = new URL(apiUrl).origin;
  expect(await fetchText(webUrl)).toBe(`200 web uses ${apiOrigin}\n`);
  // As web's page does in a browser: a POST from web's origin to api's public URL.
  const res = await fetch(apiOrigin, { method: "POST", body: "{}", headers: { Origin: new URL(webUrl).origin } });
  expect(`${res.status} ${await res.text()}`).toBe("200 api says hi\n");
});

test("a failing setup is reported with its log and services start anyway; a resume hook past 10 s runs on in the background", async () => {
  const hooks = await call({ action: "create", name: "hooks", config: join(sandbox.dir, "hooks.yaml") });
  expect(hooks.state).toBe("running");
  expect(hooks.setup).toMatchObject({ exitCode: 3, logPath: expect.stringMatching(/setup-.*\.log$/) });
  expect(hooks.errors).toEqual([
    expect.objectContaining({ code: "CONTROLLER_SETUP_FAILED", hint: expect.stringContaining(hooks.setup.logPath) }),
  ]);
  expect(await fetchText(urlOf(hooks, "web"))).toMatch(/^200 /);
  const view = await inspectEntry(sandbox.layout, "instances", "hooks");
  expect(view.resumePid).toEqual(expect.any(String));
  const resume = await call({ action: "exec-status", name: "hooks", pid: view.resumePid, timeoutMs: 30_000 });
  expect(resume).toMatchObject({ running: false, exitCode: 0 });
  const marker = await call({ action: "exec", name: "hooks", cmd: "cat resumed" });
  expect(marker.output).toBe("done\n");
});

test("an unsupervised server started by exec gets a preview that serves and keeps its host port across stop and start; the reopen keeps the setup outcome and the service logs; destroy closes every preview", async () => {
  const created = await createApp();
  const port = await freePort();
  const serve =
    `setsid nohup python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 & ` +
    `for i in $(seq 300); do curl -sf -o /dev/null http://127.0.0.1:${port}/ && break; sleep 0.2; done; ` +
    `curl -sf -o /dev/null http://127.0.0.1:${port}/`;
  const served = await call({
    action: "exec",
    name: "app",
    cmd: "echo by-exec > plain.txt; " + serve,
    timeoutMs: 60_000,
  });
  expect(served).toMatchObject({ running: false, exitCode: 0 });
  const first = await call({ action: "preview", name: "app", port, title: "plain" });
  const url = first.previews[0].url as string;
  expect(await fetchText(`${url}plain.txt`)).toBe("200 by-exec\n");

  const setup = created.setup as LooseResult;
  expect(setup).toMatchObject({ exitCode: 0, logPath: expect.stringMatching(/setup-.*\.log$/) });
  expect(await fetchText(`${urlOf(created, "web")}before-reopen`)).toMatch(/^200 /);
  await call({ action: "stop", name: "app" });
  await expect(fetch(url)).rejects.toThrow();
  const started = await call({ action: "start", name: "app" });
  expect(await call({ action: "exec", name: "app", cmd: serve, timeoutMs: 60_000 })).toMatchObject({ exitCode: 0 });
  const again = await call({ action: "preview", name: "app", port });
  expect(again.previews[0].url).toBe(url);
  expect(await fetchText(`${url}plain.txt`)).toBe("200 by-exec\n");

  // The reopen keeps the setup outcome, its log, and the service logs of the last boot.
  expect(started.setup).toEqual(setup);
  const setupLog = await call({ action: "read", name: "app", path: setup.logPath });
  expect(setupLog.content).toContain("setup step 1/1");
  const logs = await call({ action: "logs", name: "app", service: "web", lines: 500 });
  expect(logs.text).toContain("/before-reopen");

  // Destroying the running instance closes all its previews: api, web and the exec server's.
  const urls = ((await inspectEntry(sandbox.layout, "instances", "app")).previews as { url: string }[]).map(
    (p) => p.url,
  );
  expect(urls).toHaveLength(3);
  for (const u of urls) expect(await fetchText(u)).toMatch(/^200 /);
  await call({ action: "destroy", name: "app", confirm: "app" });
  for (const u of urls) await expect(fetch(u)).rejects.toThrow();
  expect(sandbox.runtime.live.size).toBe(0);
});
