// `pi-sandbox start <name>` spawns the instance's daemon before the CLI loads its modules
// (client/early-start.ts). Only for a start of an existing local instance; the CLI's call then
// finds that daemon instead of spawning a second one. Real daemons (dist/), no VM: the instance
// is a record, and its daemon exits once idle.
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConfig } from "@pi-sandbox/config";
import { startDaemonEarly } from "../src/client/early-start.js";
import { ensureDaemon } from "../src/client/spawn.js";
import { StateLayout } from "../src/state/layout.js";
import { writeRecord } from "../src/state/records.js";
import { pidAlive } from "@pi-sandbox/vm/host";

let base: string;
let layout: StateLayout;
let env: NodeJS.ProcessEnv;
let trace: string;
const savedTrace = process.env.PI_SANDBOX_TRACE;

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), "early-start-"));
  layout = new StateLayout(join(base, "state"));
  await layout.ensurePrivate();
  trace = join(base, "trace");
  // The test process's own marks (client: daemon spawned) and its daemons' go to one file.
  process.env.PI_SANDBOX_TRACE = trace;
  env = {
    ...process.env,
    PI_SANDBOX_HOME: layout.root,
    XDG_CONFIG_HOME: join(base, "config"),
    PI_SANDBOX_CONTEXT: "",
    PI_SANDBOX_DAEMON_IDLE_EXIT_MS: "1000",
  };
  await mkdir(layout.entryDir("instances", "web"), { recursive: true, mode: 0o700 });
  await writeRecord(layout, {
    kind: "instances",
    name: "web",
    createdAt: "2026-01-01T00:00:00.000Z",
    config: parseConfig("version: 1\n"),
  });
});

afterEach(async () => {
  // The daemon exits when idle; one still there after 15 s is ended here.
  const pidFile = layout.pidFile("instances", "web");
  for (let i = 0; i < 150 && existsSync(pidFile); i++) await new Promise((r) => setTimeout(r, 100));
  const pid = Number((await readFile(pidFile, "utf8").catch(() => "")).trim());
  if (pid > 0 && pidAlive(pid)) process.kill(pid);
  if (savedTrace === undefined) delete process.env.PI_SANDBOX_TRACE;
  else process.env.PI_SANDBOX_TRACE = savedTrace;
  await rm(base, { recursive: true, force: true });
});

async function marks(what: string): Promise<number> {
  const text = await readFile(trace, "utf8").catch(() => "");
  return text.split("\n").filter((line) => line.endsWith(` ${what}`)).length;
}

test("start of an existing instance spawns its daemon, and the call's own start finds it", async () => {
  const done = new AbortController();
  await startDaemonEarly(["start", "web", "--idle-suspend", "15m"], env, done.signal);
  expect(await marks("client: daemon spawned")).toBe(1);
  await ensureDaemon(layout, "instances", "web", { env });
  done.abort();
  expect(await marks("client: daemon spawned")).toBe(1);
  expect(await marks("daemon: listening")).toBe(1);
});

test.each([
  ["another command", ["stop", "web"]],
  ["options before the name", ["start", "--idle-suspend", "15m", "web"]],
  ["help", ["start", "web", "--help"]],
  ["another context", ["start", "web", "--context", "lab"]],
  ["a name with no instance", ["start", "nope"]],
  ["a name no instance can have", ["start", "../web"]],
])("%s spawns nothing", async (_what, argv) => {
  await startDaemonEarly(argv, env, new AbortController().signal);
  expect(await marks("client: daemon spawned")).toBe(0);
  expect(existsSync(layout.pidFile("instances", "web"))).toBe(false);
  expect(existsSync(join(layout.root, "instances", "nope"))).toBe(false);
});

test("a start while PI_SANDBOX_CONTEXT names another machine spawns nothing here", async () => {
  await startDaemonEarly(["start", "web"], { ...env, PI_SANDBOX_CONTEXT: "lab" }, new AbortController().signal);
  expect(await marks("client: daemon spawned")).toBe(0);
});
