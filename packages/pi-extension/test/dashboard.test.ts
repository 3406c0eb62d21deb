// The dashboard from Pi: `/sandbox dashboard` prints the link the controller returns, and the
// footer shows the dashboard's address once one runs, never a link (a link opens one session).
// No VM and no dashboard process: the controller client is a fake.
import { mkdtemp, mkdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Attachments } from "../src/attach.js";
import { createSandboxCommand } from "../src/command.js";
import { DASHBOARD_STATUS, SandboxStatus } from "../src/status.js";
import type { SandboxDependencies } from "../src/tool.js";

let home: string;
beforeAll(async () => {
  home = await mkdtemp(join(tmpdir(), "pisb-dash-"));
  await mkdir(join(home, "instances"));
});
afterAll(() => rm(home, { recursive: true, force: true }));

/** A fake client: one dashboard whose token changes on every call, as the real one's does. */
function fakeDeps(state: { running: boolean; calls: Record<string, unknown>[] }): SandboxDependencies {
  let minted = 0;
  return {
    env: { PI_SANDBOX_HOME: home },
    callAction: async (input: unknown) => {
      const action = input as Record<string, unknown>;
      state.calls.push(action);
      if (action.action === "list") return { instances: [] };
      if (action.action === "dashboard" && action.status && !state.running) return { running: false };
      if (action.action === "dashboard") {
        const started = !state.running;
        state.running = true;
        return { url: `http://127.0.0.1:4000/?token=t${++minted}`, port: 4000, pid: 77, started };
      }
      throw new Error(`unexpected ${String(action.action)}`);
    },
  } as SandboxDependencies;
}

function fakeContext(statuses: Map<string, string | undefined>, told: string[]) {
  return {
    hasUI: true,
    cwd: "/",
    ui: {
      notify: (message: string) => told.push(message),
      setStatus: (key: string, text: string | undefined) => statuses.set(key, text),
    },
  };
}

test("/sandbox dashboard prints the link, and the footer shows the address without its token", async () => {
  const state = { running: false, calls: [] as Record<string, unknown>[] };
  const deps = fakeDeps(state);
  const statuses = new Map<string, string | undefined>();
  const told: string[] = [];
  const ctx = fakeContext(statuses, told);
  const status = new SandboxStatus(deps, new Attachments({} as never, deps));
  await status.refresh(ctx as never);
  expect(statuses.get(DASHBOARD_STATUS)).toBeUndefined();

  const command = createSandboxCommand(deps, {
    onChange: (c) => void status.refresh(c),
  });
  await command.handler("dashboard", ctx as never);
  expect(told).toHaveLength(1);
  expect(told[0]).toMatch(/^Dashboard started .*pi-sandbox dashboard --stop/s);
  expect(told[0]).toContain("http://127.0.0.1:4000/?token=t1");
  expect(state.calls).toContainEqual({ action: "dashboard" });

  await status.refresh(ctx as never);
  expect(statuses.get(DASHBOARD_STATUS)).toBe("dashboard: http://127.0.0.1:4000/ (a new link: /sandbox dashboard)");
});

test("a dashboard started elsewhere shows in the footer; none running shows nothing and starts nothing", async () => {
  const state = { running: true, calls: [] as Record<string, unknown>[] };
  const statuses = new Map<string, string | undefined>();
  const status = new SandboxStatus(fakeDeps(state), new Attachments({} as never, fakeDeps(state)));
  await status.refresh(fakeContext(statuses, []) as never);
  expect(statuses.get(DASHBOARD_STATUS)).toBe("dashboard: http://127.0.0.1:4000/ (a new link: /sandbox dashboard)");
  state.running = false;
  await status.refresh(fakeContext(statuses, []) as never);
  expect(statuses.get(DASHBOARD_STATUS)).toBeUndefined();
  expect(state.calls.filter((c) => c.action === "dashboard").every((c) => c.status === true)).toBe(true);
});
