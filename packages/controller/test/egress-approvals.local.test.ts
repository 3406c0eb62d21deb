// Egress approvals through the client and a real (in-process) daemon over the local runtime: a
// guest request to a host off allowedHosts is refused at once with nobody to ask, held while an
// answerer (a Pi session, a dashboard) looks, and let through or refused by the user's answer;
// a host allowed for the instance is kept on the host (never in YAML), revoked, and the model can
// answer nothing. Every decision and answer is in the ledger; `egress` counts them per host.
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { EGRESS_HOSTS_SHOWN, egress as egressAction } from "../src/actions/egress.js";
import { callAction } from "../src/client/index.js";
import { EgressApprovals, EGRESS_HELD_HOSTS_MAX } from "../src/daemon/egress-approvals.js";
import type { HostGuard } from "../src/host-guard.js";
import { callDaemon } from "../src/state/daemon-call.js";
import { dropAnswerer, markAnswerer, readAsks } from "../src/state/egress.js";
import { StateLayout } from "../src/state/layout.js";
import { createLocalRuntime, type LocalRuntime } from "../src/testing.js";
import { inProcessDaemons, type InProcessDaemons } from "./support/in-process-daemon.js";
import type { Loose } from "./support/local-daemon.js";

let dir: string;
let env: NodeJS.ProcessEnv;
let layout: StateLayout;
let daemons: InProcessDaemons;
let runtime: LocalRuntime;

const call = (action: Loose, via: "cli" | "pi" | "dashboard" = "cli") =>
  callAction(action, { env, cwd: dir, via }) as Promise<Loose>;
const request = (host: string) => ({ host, port: 443, protocol: "https" as const, method: "GET" });

/** Resolves once the daemon has published an ask for `host` with `waiting` requests. */
async function asked(host: string, waiting = 1): Promise<Loose> {
  for (;;) {
    const ask = (await readAsks(layout, "web")).find((a) => a.host === host && a.waiting >= waiting);
    if (ask) return ask as unknown as Loose;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-egress-"));
  env = { ...process.env, PI_SANDBOX_HOME: join(dir, "state") };
  layout = new StateLayout(env.PI_SANDBOX_HOME!);
  await layout.ensurePrivate();
  await writeFile(
    join(dir, "sandbox.yaml"),
    "version: 1\nprofile: tiny\ndiskGiB: 4\nnetwork:\n  allowedHosts: [api.example.com]\n",
  );
  daemons = inProcessDaemons(layout);
  runtime = createLocalRuntime();
  await daemons.start("web", runtime);
  await call({ action: "create", name: "web", config: "sandbox.yaml" });
});

afterAll(async () => {
  await call({ action: "stop", name: "web" }).catch(() => undefined);
  await daemons.exited();
  await rm(dir, { recursive: true, force: true });
});

test("with nobody to ask a request is refused at once; with Pi looking it waits for the user's answer", async () => {
  const started = Date.now();
  await expect(runtime.guestRequest("web", request("nobody.example.org"))).resolves.toBe(false);
  expect(Date.now() - started).toBeLessThan(2000);

  await markAnswerer(layout, "web", "pi", "session-1");
  const once = runtime.guestRequest("web", request("once.example.org"));
  const second = runtime.guestRequest("web", request("once.example.org"));
  const ask = await asked("once.example.org", 2);
  expect(ask).toMatchObject({ host: "once.example.org", port: 443, protocol: "https", method: "GET" });
  await expect(call({ action: "egress", name: "web" })).resolves.toMatchObject({
    waiting: [{ host: "once.example.org", waiting: 2 }],
  });
  // Answering a host nothing waits for once is an error that says what to do.
  await expect(
    call({ action: "egress-approve", name: "web", host: "other.example.org", once: true }),
  ).rejects.toMatchObject({
    code: "CONTROLLER_EGRESS_NOT_WAITING",
  });
  const answered = await call({ action: "egress-approve", name: "web", host: "once.example.org", once: true }, "pi");
  expect(answered).toMatchObject({ answer: "once", answered: [{ host: "once.example.org", requests: 2 }] });
  expect(answered.granted).toBeUndefined();
  await expect(once).resolves.toBe(true);
  await expect(second).resolves.toBe(true);
  expect(await readAsks(layout, "web")).toEqual([]);

  // Once is once: the next request waits again, and a deny refuses it (and the host for a minute).
  const denied = runtime.guestRequest("web", request("once.example.org"));
  await asked("once.example.org");
  await call({ action: "egress-deny", name: "web", host: "once.example.org" }, "dashboard");
  await expect(denied).resolves.toBe(false);
  await expect(runtime.guestRequest("web", request("once.example.org"))).resolves.toBe(false);
  await dropAnswerer(layout, "web", "pi", "session-1");
});

test("allowed for the instance, a host is kept on the host (never in YAML) until revoked", async () => {
  await markAnswerer(layout, "web", "dashboard", "d1");
  const held = runtime.guestRequest("web", request("registry.example.net"));
  await asked("registry.example.net");
  await call({ action: "egress-approve", name: "web", host: "registry.example.net" }, "dashboard");
  await expect(held).resolves.toBe(true);
  await dropAnswerer(layout, "web", "dashboard", "d1");
  // With nobody to ask now, the grant still lets it through; a wildcard granted ahead of time too.
  await expect(runtime.guestRequest("web", request("registry.example.net"))).resolves.toBe(true);
  await call({ action: "egress-approve", name: "web", host: "*.cdn.example.net" });
  await expect(runtime.guestRequest("web", request("a.cdn.example.net"))).resolves.toBe(true);
  const view = await call({ action: "egress", name: "web" });
  expect(view.grants).toEqual([
    { host: "registry.example.net", at: expect.any(String), by: "dashboard" },
    { host: "*.cdn.example.net", at: expect.any(String), by: "cli" },
  ]);
  const yaml = await readFile(join(dir, "sandbox.yaml"), "utf8");
  expect(yaml).not.toContain("registry.example.net");
  const record = await readFile(layout.recordFile("instances", "web"), "utf8");
  expect(record).not.toContain("registry.example.net");

  await expect(call({ action: "egress-revoke", name: "web", host: "registry.example.net" })).resolves.toMatchObject({
    revoked: true,
  });
  await expect(runtime.guestRequest("web", request("registry.example.net"))).resolves.toBe(false);
  await expect(call({ action: "egress-revoke", name: "web", host: "registry.example.net" })).rejects.toMatchObject({
    code: "CONTROLLER_EGRESS_NO_GRANT",
  });
});

test("the model can answer nothing, and a host the user could not type is never asked about", async () => {
  for (const action of [
    { action: "egress-approve", name: "web", host: "evil.example.org" },
    { action: "egress-deny", name: "web", host: "evil.example.org" },
    { action: "egress-revoke", name: "web", host: "*.cdn.example.net" },
  ]) {
    await expect(callAction(action, { env, cwd: dir, caller: "model" })).rejects.toMatchObject({
      code: "CONTROLLER_USER_ONLY",
    });
  }
  // Sent to the daemon past the client (a client that claims to be the user, with a model's guard): refused there too.
  await expect(
    callDaemon(
      layout.socketPath("instances", "web"),
      { action: "egress-approve", name: "web", host: "evil.example.org" },
      { guard: {} as HostGuard, caller: "cli" },
    ),
  ).rejects.toMatchObject({ code: "CONTROLLER_USER_ONLY" });
  expect((await call({ action: "egress", name: "web" })).grants).not.toContainEqual(
    expect.objectContaining({ host: "evil.example.org" }),
  );
  await markAnswerer(layout, "web", "pi", "session-2");
  await expect(runtime.guestRequest("web", request("under_score.example.org"))).resolves.toBe(false);
  await expect(runtime.guestRequest("web", request("x".repeat(300)))).resolves.toBe(false);
  expect(await readAsks(layout, "web")).toEqual([]);
  await dropAnswerer(layout, "web", "pi", "session-2");
});

test("egress counts each host's decisions from the ledger, which holds every answer with who gave it", async () => {
  const view = await call({ action: "egress", name: "web" });
  const byHost = Object.fromEntries((view.hosts as Loose[]).map((t) => [t.host, [t.allowed, t.denied, t.lastRule]]));
  expect(byHost).toMatchObject({
    "nobody.example.org": [0, 1, "nobody to ask"],
    "once.example.org": [2, 2, "denied by the user"],
    "registry.example.net": [2, 1, "nobody to ask"],
    "a.cdn.example.net": [1, 0, "approved for this instance"],
  });
  const audit = await call({ action: "audit", name: "web", kind: ["trust"], last: 100 });
  // (The model's refused calls are trust entries too: the controller's no.)
  const answers = (audit.entries as Loose[])
    .filter((e) => String(e.data.asked[0]).startsWith("let web reach"))
    .map((e) => [e.data.answer, e.data.by, e.data.couldAnswer]);
  expect(answers).toEqual([
    ["approved once", "pi", ["pi"]],
    ["denied by the user", "dashboard", ["pi"]],
    ["approved for this instance", "dashboard", ["dashboard"]],
    ["approved for this instance", "cli", undefined],
  ]);
});

test("egress lists at most 200 hosts, the busiest first, and says how many more the guest asked for", async () => {
  const before = ((await call({ action: "egress", name: "web" })).hosts as Loose[]).length;
  for (let i = 0; i < EGRESS_HOSTS_SHOWN + 5; i++) await runtime.guestRequest("web", request(`flood-${i}.example.org`));
  const view = await call({ action: "egress", name: "web" });
  expect(view.hosts).toHaveLength(EGRESS_HOSTS_SHOWN);
  expect(view.hosts[0].host).toBe("once.example.org");
  expect(view.hostsLeftOut).toBe(before + 5);
});

test("a request nobody answers is refused at the deadline; too many hosts at once are not all asked", async () => {
  // An instance of its own: these approvals publish their asks beside no daemon's.
  await mkdir(layout.entryDir("instances", "unit"), { recursive: true });
  const records: Loose[] = [];
  let now = 0;
  const approvals = new EgressApprovals({
    layout,
    name: "unit",
    record: (kind, data) => records.push({ kind, data }),
    holdMs: 50,
    now: () => now,
  });
  await markAnswerer(layout, "unit", "pi", "session-3");
  now = Date.now();
  await expect(approvals.decide(request("late.example.org"))).resolves.toEqual({
    allowed: false,
    rule: "no answer in time",
  });
  expect(records).toEqual([{ kind: "trust", data: expect.objectContaining({ answer: "none", by: "nobody" }) }]);
  const patient = new EgressApprovals({ layout, name: "unit", record: () => undefined });
  const held = Array.from({ length: EGRESS_HELD_HOSTS_MAX }, (_, i) => patient.decide(request(`h${i}.example.org`)));
  while ((await readAsks(layout, "unit")).length < EGRESS_HELD_HOSTS_MAX) await new Promise((r) => setTimeout(r, 10));
  await expect(patient.decide(request("one-more.example.org"))).resolves.toEqual({
    allowed: false,
    rule: "too many waiting",
  });
  patient.close();
  await expect(Promise.all(held)).resolves.toEqual(held.map(() => ({ allowed: false, rule: "no answer in time" })));
  await dropAnswerer(layout, "unit", "pi", "session-3");
});

test("a session that ended without saying so stops counting at once, and its file goes after an hour", async () => {
  await markAnswerer(layout, "web", "pi", "crashed");
  const file = join(layout.egressAnswerersDir("web"), "pi.crashed");
  await utimes(file, new Date(Date.now() - 20_000), new Date(Date.now() - 20_000));
  await expect(runtime.guestRequest("web", request("late-pi.example.org"))).resolves.toBe(false);
  expect(existsSync(file)).toBe(true);
  await utimes(file, new Date(Date.now() - 2 * 3600_000), new Date(Date.now() - 2 * 3600_000));
  await expect(runtime.guestRequest("web", request("late-pi.example.org"))).resolves.toBe(false);
  expect(existsSync(file)).toBe(false);
});

test("the body bytes of the guest's exchanges wait to be summarised per host (a minute at most)", async () => {
  const cdn = (path: string) => ({ ...request("a.cdn.example.net"), method: path });
  await expect(runtime.guestRequest("web", cdn("GET"), { bytesOut: 0, bytesIn: 3_145_735 })).resolves.toBe(true);
  await expect(runtime.guestRequest("web", cdn("POST"), { bytesOut: 5000, bytesIn: 10 })).resolves.toBe(true);
  const view = await call({ action: "egress", name: "web" });
  expect((view.hosts as Loose[]).find((t) => t.host === "a.cdn.example.net")).toMatchObject({
    bytesOut: 0,
    bytesIn: 0,
  });
});

test("a stop refuses what is held: the requests go with the run, and nothing is listed as waiting", async () => {
  await markAnswerer(layout, "web", "pi", "session-4");
  const held = runtime.guestRequest("web", request("held.example.org"));
  await asked("held.example.org");
  await call({ action: "stop", name: "web" });
  await expect(held).resolves.toBe(false);
  expect(await readAsks(layout, "web")).toEqual([]);
  await dropAnswerer(layout, "web", "pi", "session-4");
});

test("a stop writes the summary: egress lists each host's bytes each way, audit says them in words", async () => {
  const view = await call({ action: "egress", name: "web" });
  expect((view.hosts as Loose[]).find((t) => t.host === "a.cdn.example.net")).toMatchObject({
    allowed: 3,
    bytesOut: 5000,
    bytesIn: 3_145_745,
  });
  const text = egressAction.formatText!(view as never);
  expect(text).toMatch(/\s3 allowed\s+0 denied\s+4\.9 KiB out\s+3\.0 MiB in {2}a\.cdn\.example\.net /);
  const audit = await call({ action: "audit", name: "web", kind: ["egress-bytes"], last: 10 });
  expect((audit.entries as Loose[]).map((e) => e.data)).toEqual([
    expect.objectContaining({
      host: "a.cdn.example.net",
      port: 443,
      protocol: "https",
      exchanges: 2,
      bytesOut: 5000,
      bytesIn: 3_145_745,
    }),
  ]);
});
