// Supervised services through the real agent as a host process: readiness (TCP, HTTP), a restart
// about 1 s after each exit, ensure after a YAML edit, sticky ports, PUBLIC_URL, rotated logs.
import { mkdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { parseConfig } from "@pi-sandbox/config";
import { isSupervisorError, type AgentEvent, type ServiceStatus } from "../src/index.js";
import { processAlive, sleep, startLocal, waitFor, type LocalSupervisor } from "./support/local.js";

let sup: LocalSupervisor;
beforeAll(async () => {
  sup = await startLocal();
  await mkdir(join(sup.workspace, "site"), { recursive: true });
});
afterAll(async () => {
  await sup?.close();
});
afterEach(async () => {
  await sup.client.stopServices();
});

const yaml = (...lines: string[]) => ["version: 1", "services:", ...lines].join("\n");
const HTTP_WEB = [
  "  web:",
  "    command: exec python3 -m http.server $PORT --bind 127.0.0.1",
  "    cwd: site",
  "    health: /",
];

async function status(name: string): Promise<ServiceStatus> {
  const [found] = await sup.client.serviceStatus([name]);
  return found!;
}

async function get(port: number, path = "/"): Promise<number> {
  const response = await fetch(`http://127.0.0.1:${port}${path}`);
  await response.arrayBuffer();
  return response.status;
}

function eventsFor(name: string, type: string, since: number): AgentEvent[] {
  return sup.events.slice(since).filter((e) => e.data.service === name && e.data.type === type);
}

test("an HTTP service comes up ready with PORT set, and is restarted 1 s after it is killed", async () => {
  await sup.writeYaml(yaml(...HTTP_WEB));
  const result = await sup.client.ensureServices();
  expect(result.started).toEqual(["web"]);
  expect(result.failures).toEqual([]);
  const web = await status("web");
  expect(web).toMatchObject({ state: "running", restarts: 0, readiness: { state: "ready" } });
  expect(await get(web.port!)).toBe(200);

  const since = sup.events.length;
  const killedAt = Date.now();
  process.kill(web.pid!, "SIGKILL");
  const back = await waitFor(
    async () => {
      const s = await status("web");
      return s.restarts === 1 && s.readiness.state === "ready" ? s : undefined;
    },
    10_000,
    "web to come back",
  );
  const restartedAfter = Date.now() - killedAt;
  expect(restartedAfter).toBeGreaterThanOrEqual(900);
  expect(restartedAfter).toBeLessThan(3_000);
  expect(back.port).toBe(web.port);
  expect(back.pid).not.toBe(web.pid);
  expect(back.lastExit).toMatchObject({ exitCode: 137, signal: "SIGKILL" });
  expect(eventsFor("web", "exit", since)).toHaveLength(1);
  expect(await get(back.port!)).toBe(200);
});

test("a service that exits with status 0 is restarted too, about once a second", async () => {
  await sup.writeYaml(yaml("  blip:", "    command: echo tick", "    health: process"));
  const since = sup.events.length;
  await sup.client.ensureServices();
  await waitFor(() => eventsFor("blip", "start", since).length >= 4, 10_000, "four starts");
  const starts = eventsFor("blip", "start", since).length;
  const s = await status("blip");
  expect(s.restarts).toBeGreaterThanOrEqual(3);
  expect(s.lastExit).toMatchObject({ exitCode: 0 });
  expect(starts).toBeLessThanOrEqual(6);
});

test("restart delay measured between exit and the next start is 1.0 ± 0.2 s", async () => {
  await sup.writeYaml(yaml("  once:", "    command: sleep 0.2", "    health: process"));
  const stamps: { type: string; at: number }[] = [];
  const off = sup.client.onEvent((e) => {
    if (e.data.service === "once") stamps.push({ type: String(e.data.type), at: performance.now() });
  });
  await sup.client.ensureServices();
  await waitFor(() => stamps.filter((s) => s.type === "start").length >= 3, 10_000, "three starts");
  off();
  const gaps: number[] = [];
  for (let i = 0; i < stamps.length - 1; i++) {
    if (stamps[i]!.type === "exit" && stamps[i + 1]!.type === "start") gaps.push(stamps[i + 1]!.at - stamps[i]!.at);
  }
  expect(gaps.length).toBeGreaterThanOrEqual(2);
  for (const gap of gaps) {
    expect(gap).toBeGreaterThan(800);
    expect(gap).toBeLessThan(1_200);
  }
});

test("a crash-looping service never starves the others", async () => {
  await sup.writeYaml(yaml("  crashy:", "    command: exit 1", "    health: process", ...HTTP_WEB));
  const result = await sup.client.ensureServices();
  expect(result.started).toEqual(["crashy", "web"]);
  const web = await status("web");
  expect(web.readiness.state).toBe("ready");
  await sleep(2_500);
  expect((await status("crashy")).restarts).toBeGreaterThanOrEqual(1);
  expect(await get((await status("web")).port!)).toBe(200);
});

test("a readiness failure names the service and its log, and leaves it supervised", async () => {
  await sup.writeYaml(yaml("  deaf:", "    command: sleep 600", "    timeoutMs: 1500"));
  const t0 = Date.now();
  const result = await sup.client.ensureServices();
  expect(Date.now() - t0).toBeLessThan(5_000);
  expect(result.failures).toHaveLength(1);
  const [failure] = result.failures;
  expect(failure).toMatchObject({ service: "deaf", code: "SERVICE_NOT_READY" });
  expect(failure!.message).toContain("deaf");
  expect(failure!.message).toContain("1500 ms");
  expect(failure!.logPath).toBe(join(sup.stateDir, "logs", "deaf.log"));
  const deaf = await status("deaf");
  expect(deaf.state).toBe("running");
  expect(deaf.readiness.state).toBe("failed");
  expect(await processAlive(deaf.pid!)).toBe(true);
});

test("TCP readiness, the default, waits until the port accepts connections", async () => {
  await sup.writeYaml(yaml("  late:", "    command: sleep 1; exec python3 -m http.server $PORT --bind 127.0.0.1"));
  const t0 = Date.now();
  const result = await sup.client.ensureServices();
  expect(result.failures).toEqual([]);
  expect(Date.now() - t0).toBeGreaterThanOrEqual(1_000);
  const late = await status("late");
  expect(late).toMatchObject({ health: { kind: "tcp" }, readiness: { state: "ready" } });
  expect(await get(late.port!)).toBe(200);
});

test("HTTP readiness waits for a 2xx/3xx answer, not just an open port", async () => {
  const server = [
    "import http.server, os, time",
    "start = time.time()",
    "class H(http.server.BaseHTTPRequestHandler):",
    "    def do_GET(self):",
    "        code = 200 if time.time() - start > 1.5 else 503",
    "        self.send_response(code); self.send_header('Content-Length', '0'); self.end_headers()",
    "    def log_message(self, *a): pass",
    "http.server.HTTPServer(('127.0.0.1', int(os.environ['PORT'])), H).serve_forever()",
  ].join("\n");
  await sup.client.writeFile(join(sup.workspace, "slow.py"), server);
  await sup.writeYaml(
    yaml("  slow:", "    command: exec python3 slow.py", "    health: /healthz", "    timeoutMs: 10000"),
  );
  const t0 = Date.now();
  const result = await sup.client.ensureServices();
  expect(result.failures).toEqual([]);
  expect(Date.now() - t0).toBeGreaterThanOrEqual(1_400);
  expect((await status("slow")).readiness.state).toBe("ready");
});

test("ensure after a YAML edit starts the new service and leaves the running one alone", async () => {
  await sup.writeYaml(yaml(...HTTP_WEB));
  await sup.client.ensureServices();
  const before = await status("web");
  await sup.writeYaml(yaml(...HTTP_WEB, "  worker:", "    command: sleep 600", "    health: process"));
  const result = await sup.client.ensureServices();
  expect(result.started).toEqual(["worker"]);
  expect(result.kept).toEqual(["web"]);
  const after = await status("web");
  expect(after.pid).toBe(before.pid);
  expect(after.restarts).toBe(0);
  expect((await status("worker")).state).toBe("running");
});

test("ensure and restart take the config the caller holds and do not read the guest file", async () => {
  // The caller's parsed config is used as is: here the guest has no file at all.
  await sup.client.exec(`rm -f ${join(sup.workspace, ".sandbox.yaml")}`);
  const config = parseConfig(yaml(...HTTP_WEB));
  const ensured = await sup.client.ensureServices(undefined, { config });
  expect(ensured.started).toEqual(["web"]);
  const before = await status("web");
  const restarted = await sup.client.restartServices(["web"], { config });
  expect(restarted.started).toEqual(["web"]);
  const after = await status("web");
  expect(after.port).toBe(before.port);
  expect(after.pid).not.toBe(before.pid);
});

test("restart re-reads the command and keeps the port; stop stays stopped until ensure", async () => {
  await sup.writeYaml(yaml(...HTTP_WEB));
  await sup.client.ensureServices();
  const first = await status("web");
  await sup.writeYaml(
    yaml(
      ...HTTP_WEB.slice(0, 1),
      "    command: exec python3 -m http.server $PORT --bind 127.0.0.1 --directory .",
      ...HTTP_WEB.slice(2),
    ),
  );
  const restarted = await sup.client.restartServices(["web"]);
  expect(restarted.started).toEqual(["web"]);
  const second = await status("web");
  expect(second.port).toBe(first.port);
  expect(second.pid).not.toBe(first.pid);
  expect(second.command).toContain("--directory .");
  expect(await processAlive(first.pid!)).toBe(false);

  const stopped = await sup.client.stopServices(["web"]);
  expect(stopped.stopped).toEqual(["web"]);
  await sleep(1_500);
  const still = await status("web");
  expect(still).toMatchObject({ state: "stopped", pid: null });
  expect(await processAlive(second.pid!)).toBe(false);

  const again = await sup.client.ensureServices();
  expect(again.started).toEqual(["web"]);
  expect((await status("web")).port).toBe(first.port);
});

test("ports are sticky across a reopen; fixed ports are honoured", async () => {
  await sup.writeYaml(
    yaml(...HTTP_WEB, "  fixed:", "    command: sleep 600", "    port: 28999", "    health: process"),
  );
  await sup.client.ensureServices();
  const port = (await status("web")).port;
  expect((await status("fixed")).port).toBe(28999);
  const ports = JSON.parse(await readFile(join(sup.stateDir, "ports.json"), "utf8")) as {
    ports: Record<string, number>;
  };
  expect(ports.ports.web).toBe(port);
  await sup.reopen();
  // A reopen clears everything in the state dir except the port allocations.
  const before = await status("web");
  expect(before.state).toBe("not-started");
  await sup.client.ensureServices();
  expect((await status("web")).port).toBe(port);
});

test("PUBLIC_URL and ${services.X.publicURL} come from the preview origins the host passes", async () => {
  await sup.writeYaml(
    yaml(
      ...HTTP_WEB,
      "    preview: true",
      "  api:",
      "    command: env > env.txt; exec sleep 600",
      "    health: process",
      "    env:",
      "      WEB_URL: ${services.web.publicURL}/app",
      "    preview: true",
      "  plain:",
      "    command: env > plain-env.txt; exec sleep 600",
      "    health: process",
    ),
  );
  const result = await sup.client.ensureServices(undefined, {
    previewOrigins: { web: "http://127.0.0.1:41234", api: "http://127.0.0.1:41235" },
  });
  expect(result.failures).toEqual([]);
  const envOf = (file: string) =>
    waitFor(async () => {
      const text = await readFile(join(sup.workspace, file), "utf8").catch(() => "");
      return text.includes("PORT=") ? text : undefined;
    });
  const env = await envOf("env.txt");
  expect(env).toContain("WEB_URL=http://127.0.0.1:41234/app\n");
  expect(env).toContain("PUBLIC_URL=http://127.0.0.1:41235\n");
  expect(env).toMatch(/^PORT=\d+$/m);
  const plain = await envOf("plain-env.txt");
  expect(plain).not.toContain("PUBLIC_URL=");

  // Without an origin for web, api cannot resolve its reference: a failure, not a crash.
  await sup.client.stopServices();
  const missing = await sup.client.ensureServices();
  expect(missing.failures).toEqual([
    expect.objectContaining({
      service: "api",
      code: "SERVICE_REFERENCE_UNRESOLVED",
      hint: "start web with a preview first",
    }),
  ]);
  expect(missing.failures[0]!.message).not.toContain("start web");
});

test("ensure with names starts only those; an undeclared name is SERVICE_NOT_FOUND and starts nothing", async () => {
  await sup.writeYaml(
    yaml(
      ...HTTP_WEB,
      "  idle:",
      "    command: exec sleep 600",
      "    health: process",
      "  fixed:",
      "    command: exec sleep 600",
      "    health: process",
      "    port: 30999",
    ),
  );
  await expect(sup.client.ensureServices(["ghost"])).rejects.toMatchObject({
    code: "SERVICE_NOT_FOUND",
    details: { service: "ghost", declared: ["web", "idle", "fixed"] },
  });
  const one = await sup.client.ensureServices(["idle"]);
  expect(one).toMatchObject({ started: ["idle"], kept: [], failures: [] });
  // web and fixed may have run in earlier tests of this agent; ensure idle left them alone.
  expect(one.services.map((s) => [s.name, s.state === "running"])).toEqual([
    ["web", false],
    ["idle", true],
    ["fixed", false],
  ]);
  expect(one.services[1]!.port).not.toBe(30999);
  const again = await sup.client.ensureServices(["idle", "web"]);
  expect(again).toMatchObject({ started: ["web"], kept: ["idle"] });
  expect((await status("fixed")).state).not.toBe("running");
});

test("services limited to darwin are not started on the Linux guest", async () => {
  await sup.writeYaml(yaml("  mac:", "    command: sleep 600", "    health: process", "    platforms: [darwin]"));
  const result = await sup.client.ensureServices();
  expect(result.started).toEqual([]);
  expect(result.services.map((s) => s.name)).not.toContain("mac");
});

test("ad-hoc services start and wait for readiness, and may not reuse a declared name", async () => {
  await sup.writeYaml(yaml(...HTTP_WEB));
  await expect(sup.client.startService({ name: "web", command: "sleep 1" })).rejects.toMatchObject({
    code: "SERVICE_DECLARED",
  });
  const adhoc = await sup.client.startService({
    name: "docs",
    command: "exec python3 -m http.server $PORT --bind 127.0.0.1",
    cwd: "site",
    health: { kind: "http", path: "/" },
  });
  expect(adhoc).toMatchObject({ name: "docs", adhoc: true, state: "running", readiness: { state: "ready" } });
  expect(await get(adhoc.port!)).toBe(200);
  const all = await sup.client.serviceStatus();
  expect(all.map((s) => s.name)).toEqual(["web", "docs"]);
  const error = await sup.client.startService({ name: "Bad_Name", command: "true" }).catch((e: unknown) => e);
  expect(isSupervisorError(error, "INVALID_ARGUMENT")).toBe(true);
});

test("unknown services and a missing guest YAML are typed errors", async () => {
  await sup.writeYaml(yaml(...HTTP_WEB));
  await expect(sup.client.restartServices(["ghost"])).rejects.toMatchObject({ code: "SERVICE_NOT_FOUND" });
  await expect(sup.client.stopServices(["ghost"])).rejects.toMatchObject({ code: "SERVICE_NOT_FOUND" });
  await expect(sup.client.logs("ghost")).rejects.toMatchObject({ code: "SERVICE_NOT_FOUND" });
  await sup.writeYaml("version: 1\nservices:\n  web:\n    command: 5\n    bogus: true\n");
  await expect(sup.client.ensureServices()).rejects.toMatchObject({ code: "SUPERVISOR_GUEST_CONFIG_INVALID" });
  await sup.client.exec(`rm ${join(sup.workspace, ".sandbox.yaml")}`);
  await expect(sup.client.ensureServices()).rejects.toMatchObject({ code: "SUPERVISOR_GUEST_CONFIG_NOT_FOUND" });
});

test("logs rotate at 1 MiB and tail by lines", async () => {
  await sup.writeYaml(
    yaml(
      "  chatty:",
      "    command: python3 -c \"import sys; [print('line %06d' % i) for i in range(250000)]\"; exec sleep 600",
      "    health: process",
    ),
  );
  await sup.client.ensureServices();
  const log = join(sup.stateDir, "logs", "chatty.log");
  await waitFor(
    async () => {
      const tail = await sup.client.logs("chatty", { lines: 1 });
      return tail.text.includes("line 249999") ? true : undefined;
    },
    20_000,
    "all lines logged",
  );
  expect((await stat(log)).size).toBeLessThanOrEqual(1024 * 1024);
  expect((await stat(`${log}.1`)).size).toBeLessThanOrEqual(1024 * 1024);
  const tail = await sup.client.logs("chatty");
  expect(tail.lines).toBe(100);
  expect(tail.text.trimEnd().split("\n")).toHaveLength(100);
  expect(tail.text.trimEnd().endsWith("line 249999")).toBe(true);
  const most = await sup.client.logs("chatty", { lines: 500 });
  expect(most.lines).toBe(500);
  await expect(sup.client.logs("chatty", { lines: 501 })).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
});
