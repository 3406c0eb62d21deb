// `egress-watch`, what another machine's dashboard or Pi calls through a context: the instances' guests
// then hold a request for a new host for that page (the dashboard is among who can answer), and
// what waits comes back. The user's only; a name that is no instance name is refused.
import { mkdir } from "node:fs/promises";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction } from "../src/client/index.js";
import { answerersNow, writeAsks } from "../src/state/egress.js";
import { StateLayout } from "../src/state/layout.js";

let root: string;
let layout: StateLayout;
let env: NodeJS.ProcessEnv;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), "watch-"));
  layout = new StateLayout(root);
  env = { ...process.env, PI_SANDBOX_HOME: root, PI_SANDBOX_CONTEXT: "local" };
  await layout.ensurePrivate();
  await mkdir(layout.entryDir("instances", "demo"), { recursive: true });
  await mkdir(layout.entryDir("instances", "quiet"), { recursive: true });
});

afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

test("the page becomes an answerer there, and gets what waits", async () => {
  expect(await answerersNow(layout, "demo")).toEqual([]);
  const ask = {
    host: "registry.npmjs.org",
    port: 443,
    protocol: "https",
    method: "GET",
    waiting: 1,
    since: new Date().toISOString(),
    until: new Date(Date.now() + 60_000).toISOString(),
  };
  await writeAsks(layout, "demo", [ask as never]);
  const watched = await callAction({ action: "egress-watch", names: ["demo", "quiet"], id: "dashboard-ab12" }, { env });
  expect(watched).toEqual({ waiting: { demo: [ask] } });
  expect(await answerersNow(layout, "demo")).toEqual(["dashboard"]);
  expect(await answerersNow(layout, "quiet")).toEqual(["dashboard"]);
  // A Pi session there says so as Pi (the ledger's "who could have answered" names it).
  await callAction({ action: "egress-watch", names: ["quiet"], id: "1234-ab12", by: "pi" }, { env });
  expect((await answerersNow(layout, "quiet")).sort()).toEqual(["dashboard", "pi"]);
  await expect(
    callAction({ action: "egress-watch", names: ["quiet"], id: "x", by: "model" }, { env }),
  ).rejects.toMatchObject({ code: "CONTROLLER_BAD_INPUT" });
});

test("a model cannot say it answers; a path for a name is refused", async () => {
  await expect(
    callAction({ action: "egress-watch", names: ["demo"], id: "x" }, { env, caller: "model" }),
  ).rejects.toMatchObject({ code: "CONTROLLER_USER_ONLY" });
  await expect(callAction({ action: "egress-watch", names: ["../../etc"], id: "x" }, { env })).rejects.toMatchObject({
    code: "CONTROLLER_INVALID_NAME",
  });
  await expect(callAction({ action: "egress-watch", names: ["demo"], id: "a/b" }, { env })).rejects.toMatchObject({
    code: "CONTROLLER_BAD_INPUT",
  });
  expect(await answerersNow(layout, "demo")).toEqual([]);
});
