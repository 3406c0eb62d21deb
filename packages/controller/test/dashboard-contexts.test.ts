// The dashboard lists every context's instances without a VM or ssh: a fake action layer answers
// per context. The local list never waits for another machine; one that fails, or does not answer
// in time, is a row with its error; text from the far side arrives escaped. A page's action,
// services, log or ledger of another machine's instance goes through that context, a context the
// page does not list is refused, and the guard holds for them as for this machine's.
import { startDashboardServer } from "../src/dashboard/server.js";
import { ContextPoller } from "../src/dashboard/contexts.js";
import { SnapshotPoller, type DashboardSnapshot } from "../src/dashboard/snapshot.js";
import { ControllerError } from "../src/errors.js";
import type { DaemonLogger } from "../src/log.js";
import { runningView } from "./support/views.js";
import { dashboardSession } from "./support/dashboard-login.js";

const log: DaemonLogger = { info: () => undefined, warn: () => undefined, child: () => log };
const local = runningView({ name: "here" });
const far = runningView({
  name: "there",
  previews: [{ service: "web", url: "http://127.0.0.3:4100/", title: "<img src=x onerror=alert(1)>\u001b[2J" }],
});

/** This machine: `local` plus three ssh contexts. */
async function call(input: Record<string, unknown>): Promise<unknown> {
  if (input.action === "context-ls") {
    return {
      current: "local",
      contexts: [
        { name: "local", url: "" },
        { name: "big", url: "ssh://me@big.lan" },
        { name: "down", url: "ssh://down.lan" },
        { name: "slow", url: "ssh://slow.lan" },
      ],
    };
  }
  if (input.action === "list") return input.kind === "templates" ? { templates: [] } : { instances: [local] };
  return {};
}

/** The contexts: big answers, down refuses the connection, slow never answers. */
const asked: string[] = [];
async function callIn(context: string, input: Record<string, unknown>): Promise<unknown> {
  asked.push(`${context}:${String(input.action)}`);
  if (context === "big") return { instances: [far] };
  if (context === "down") {
    throw new ControllerError(
      "CONTROLLER_CONTEXT_UNREACHABLE",
      "ssh: connect to host down.lan: <b>refused</b>\u001b[31m",
      {
        hint: "Check that ssh down.lan works.",
      },
    );
  }
  return new Promise(() => undefined);
}

test("the local list comes at once; the other contexts follow, each with its instances or its error", async () => {
  asked.length = 0;
  const contexts = new ContextPoller(call, callIn, { timeoutMs: 200 });
  const poller = new SnapshotPoller(call, { idleMs: 60_000, contexts });
  const seen: DashboardSnapshot[] = [];
  const unsubscribe = poller.subscribe((snapshot) => seen.push(snapshot));
  const started = Date.now();
  await poller.refresh();
  expect(Date.now() - started).toBeLessThan(150);
  expect(poller.snapshot.instances.map((v) => [v.context, v.name])).toEqual([["local", "here"]]);
  expect(poller.snapshot.contexts).toEqual([]);
  await new Promise((resolve) => setTimeout(resolve, 400));
  unsubscribe();
  poller.close();
  const [big, down, slow] = poller.snapshot.contexts;
  expect(big).toMatchObject({ context: "big", url: "ssh://me@big.lan" });
  expect(big!.instances.map((v) => [v.context, v.name, v.previews[0]!.url])).toEqual([
    ["big", "there", "http://127.0.0.3:4100/"],
  ]);
  expect(big!.instances[0]!.previews[0]!.title).toBe("<img src=x onerror=alert(1)>\\x1b[2J");
  expect(down!.instances).toEqual([]);
  expect(down!.error).toMatchObject({
    code: "CONTROLLER_CONTEXT_UNREACHABLE",
    message: "ssh: connect to host down.lan: <b>refused</b>\\x1b[31m",
  });
  expect(slow!.error).toMatchObject({
    code: "CONTROLLER_CONTEXT_UNREACHABLE",
    message: "context slow did not answer within 0.2 s",
  });
  // The page heard of the contexts as soon as they settled, with the local list kept.
  expect(seen.at(-1)!.contexts.map((c) => c.context)).toEqual(["big", "down", "slow"]);
  expect(seen.at(-1)!.instances.map((v) => v.name)).toEqual(["here"]);
  // Only `list` went to the other machines; `local` was never asked through a context.
  expect(new Set(asked)).toEqual(new Set(["big:list", "down:list", "slow:list"]));
});

test("with no page listening, no other machine is asked", async () => {
  asked.length = 0;
  const poller = new SnapshotPoller(call, { idleMs: 60_000, contexts: new ContextPoller(call, callIn) });
  await poller.refresh();
  await new Promise((resolve) => setTimeout(resolve, 50));
  poller.close();
  expect(asked).toEqual([]);
  expect(poller.snapshot.instances.map((v) => v.name)).toEqual(["here"]);
});

test("a context still silent is not asked again until it answers; its row keeps saying so", async () => {
  asked.length = 0;
  const contexts = new ContextPoller(call, callIn, { timeoutMs: 50 });
  await contexts.poll();
  const again = await contexts.poll();
  expect(asked.filter((a) => a.startsWith("slow:"))).toEqual(["slow:list"]);
  expect(asked.filter((a) => a.startsWith("big:"))).toEqual(["big:list", "big:list"]);
  expect(again!.find((c) => c.context === "slow")!.error!.code).toBe("CONTROLLER_CONTEXT_UNREACHABLE");
});

test("the served state and page: other machines by name, their errors as text, their instances' buttons", async () => {
  const key = "ab".repeat(32);
  const server = await startDashboardServer({
    call,
    callIn,
    key,
    log,
    pollMs: { active: 100, idle: 100 },
    contextTimeoutMs: 100,
  });
  try {
    const origin = `http://127.0.0.1:${server.port}`;
    const cookie = await dashboardSession(origin, key);
    // Other machines are asked only while a page listens (its event stream).
    const stream = new AbortController();
    const events = await fetch(`${origin}/api/events`, { headers: { cookie }, signal: stream.signal });
    expect(events.status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 400));
    stream.abort();
    const state = (await (await fetch(`${origin}/api/state`, { headers: { cookie } })).json()) as DashboardSnapshot;
    expect(state.instances.map((v) => [v.context, v.name])).toEqual([["local", "here"]]);
    expect(state.contexts.map((c) => [c.context, c.instances.map((v) => v.name), c.error?.code])).toEqual([
      ["big", ["there"], undefined],
      ["down", [], "CONTROLLER_CONTEXT_UNREACHABLE"],
      ["slow", [], "CONTROLLER_CONTEXT_UNREACHABLE"],
    ]);
    const page = await (await fetch(`${origin}/`, { headers: { cookie } })).text();
    expect(page).toContain('<section id="contexts"');
    expect(page).toContain("Other machines");
    const script = await (await fetch(`${origin}/app.js`, { headers: { cookie } })).text();
    // Far-side text goes in as text; remote rows get this machine's buttons, naming their context.
    const contextCode = script.slice(script.indexOf("function contextRow"), script.indexOf("let latest;"));
    expect(contextCode).not.toMatch(/innerHTML|insertAdjacentHTML/);
    expect(contextCode).toContain("instanceActions(view, view.context)");
    expect(contextCode).toContain("Could not list context ${context}: ${error.code}: ${error.message}");
  } finally {
    await server.close();
  }
});

const ask = {
  host: "registry.npmjs.org",
  port: 443,
  protocol: "https",
  method: "GET",
  since: "2026-01-01T00:00:00.000Z",
  until: "2099-01-01T00:00:00.000Z",
  waiting: 2,
};

test("another machine's instance: the page's actions, services, log, ledger and egress answers go through its context", async () => {
  const key = "cd".repeat(32);
  const sent: string[] = [];
  const here: string[] = [];
  const server = await startDashboardServer({
    call: async (input) => {
      if (!["list", "context-ls", "checkpoints", "egress"].includes(String(input.action))) {
        here.push(String(input.action));
      }
      return call(input);
    },
    callIn: async (context, input) => {
      if (input.action !== "list") sent.push(`${context}:${JSON.stringify(input)}`);
      if (context !== "big") return callIn(context, input);
      if (input.action === "list") return { instances: [far] };
      if (input.action === "services") return { services: [{ name: "web", state: "running", port: 4100 }] };
      if (input.action === "logs") return { text: "far line \u001b[31m\n", cursor: "1" };
      if (input.action === "audit") return { entries: [] };
      if (input.action === "egress-watch") return { waiting: { there: [ask] } };
      return { name: input.name, state: "stopped" };
    },
    key,
    log,
    pollMs: { active: 100, idle: 100 },
    contextTimeoutMs: 100,
  });
  const origin = `http://127.0.0.1:${server.port}`;
  const stream = new AbortController();
  try {
    const cookie = await dashboardSession(origin, key);
    await fetch(`${origin}/api/events`, { headers: { cookie }, signal: stream.signal });
    await new Promise((resolve) => setTimeout(resolve, 400));
    // While the page listens, it is an answerer there of the running instance's egress asks,
    // and what waits there is on the page with the context's name.
    const watch = sent.find((s) => s.startsWith('big:{"action":"egress-watch"'));
    expect(watch).toMatch(/^big:\{"action":"egress-watch","names":\["there"\],"id":"dashboard-[0-9a-f]{16}"\}$/);
    const state = (await (await fetch(`${origin}/api/state`, { headers: { cookie } })).json()) as DashboardSnapshot;
    expect(state.contexts.find((c) => c.context === "big")!.egress).toEqual({ there: [ask] });
    expect(state.egress).toEqual({});
    sent.length = 0;
    const post = (body: unknown, headers: Record<string, string> = { origin }) =>
      fetch(`${origin}/api/action`, {
        method: "POST",
        headers: { cookie, "content-type": "application/json", ...headers },
        body: JSON.stringify(body),
      });
    // Stop from the page: run there, as pi-sandbox stop there --context big.
    const stopped = await post({ op: "stop", name: "there", context: "big" });
    expect(stopped.status).toBe(200);
    expect(((await stopped.json()) as { result: unknown }).result).toEqual({ name: "there", state: "stopped" });
    const destroyed = await post({ op: "destroy", name: "there", context: "big", confirm: "there" });
    expect(destroyed.status).toBe(200);
    expect((await post({ op: "egress-once", name: "there", host: "registry.npmjs.org", context: "big" })).status).toBe(
      200,
    );
    expect(sent.filter((s) => !s.includes('"egress-watch"'))).toEqual([
      'big:{"action":"stop","name":"there"}',
      'big:{"action":"destroy","name":"there","confirm":"there"}',
      'big:{"action":"egress-approve","name":"there","host":"registry.npmjs.org","once":true}',
    ]);
    sent.length = 0;
    // A context the page does not list, or an origin other than the page's: nothing is called.
    const unknown = await post({ op: "stop", name: "there", context: "elsewhere" });
    expect(unknown.status).toBe(409);
    expect(((await unknown.json()) as { error: { code: string } }).error.code).toBe("CONTROLLER_CONTEXT_NOT_FOUND");
    expect(
      (await post({ op: "stop", name: "there", context: "big" }, { origin: "http://127.0.0.3:4100" })).status,
    ).toBe(403);
    expect((await post({ op: "stop", name: "there", context: "big" }, {})).status).toBe(403);
    expect(sent.filter((s) => !s.includes('"egress-watch"'))).toEqual([]);
    expect(here).toEqual([]);
    // Details: its services, a service log and its ledger, all from there.
    const services = await fetch(`${origin}/api/services?name=there&context=big`, { headers: { cookie } });
    expect(await services.json()).toEqual({ services: [{ name: "web", state: "running", port: 4100 }] });
    const logs = new AbortController();
    const logStream = await fetch(`${origin}/api/logs?name=there&service=web&context=big`, {
      headers: { cookie },
      signal: logs.signal,
    });
    const reader = logStream.body!.getReader();
    let text = "";
    while (!text.includes("far line")) text += new TextDecoder().decode((await reader.read()).value);
    logs.abort();
    expect(text).toContain('"lines":["far line \\\\x1b[31m"]');
    const ledger = new AbortController();
    const audit = await fetch(`${origin}/api/audit?name=there&context=big`, {
      headers: { cookie },
      signal: ledger.signal,
    });
    expect(audit.status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 200));
    ledger.abort();
    expect(sent.some((s) => s.startsWith('big:{"action":"services","name":"there"'))).toBe(true);
    expect(sent.some((s) => s.startsWith('big:{"action":"logs","name":"there","service":"web"'))).toBe(true);
    expect(sent.some((s) => s.startsWith('big:{"action":"audit"'))).toBe(true);
    expect(here).toEqual([]);
    const refused = await fetch(`${origin}/api/services?name=there&context=elsewhere`, { headers: { cookie } });
    expect(refused.status).toBe(409);
  } finally {
    stream.abort();
    await server.close();
  }
});
