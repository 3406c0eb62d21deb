// The dashboard's ledger timeline without a VM: the server follows an instance's ledger through the
// audit action (a fake one here) and streams it to the page: the kinds to filter by, the last
// entries in words with control characters escaped, then each entry written after them, only the
// kinds asked for. The page itself, in a real Chromium, is e2e's dashboard test.
import { startDashboardServer, type DashboardServer } from "../src/dashboard/server.js";
import { timelineEntry } from "../src/dashboard/timeline.js";
import { LEDGER_KINDS, type LedgerEntry } from "../src/state/ledger.js";
import type { DaemonLogger } from "../src/log.js";
import type { Loose } from "./support/local-daemon.js";
import { runningView } from "./support/views.js";
import { dashboardSession } from "./support/dashboard-login.js";

const key = "ab".repeat(32);
const log: DaemonLogger = { info: () => undefined, warn: () => undefined, child: () => log };
const audits: Record<string, unknown>[] = [];
const entries: LedgerEntry[] = [];

function entry(kind: LedgerEntry["kind"], data: Record<string, unknown>): LedgerEntry {
  return { seq: entries.length + 1, at: new Date().toISOString(), kind, data, prev: "0", hash: "0" };
}

async function call(input: Record<string, unknown>): Promise<unknown> {
  if (input.action === "list") return input.kind === "templates" ? { templates: [] } : { instances: [runningView()] };
  if (input.action !== "audit") throw new Error(`unexpected ${String(input.action)}`);
  audits.push(input);
  const after = Number(input.cursor ?? 0);
  const kinds = input.kind as string[] | undefined;
  const read = entries.filter((e) => e.seq > after && (!kinds || kinds.includes(e.kind)));
  return { name: input.name, entries: read, cursor: String(entries.length), more: false };
}

let server: DashboardServer;
let origin: string;
let cookie: string;

beforeAll(async () => {
  server = await startDashboardServer({ call, key, log, pollMs: { active: 100, idle: 100 } });
  origin = `http://127.0.0.1:${server.port}`;
  cookie = await dashboardSession(origin, key);
});
afterAll(() => server.close());

/** Reads server-sent events from `path` until `until` holds of the events so far. */
async function events(path: string, until: (seen: { event: string; data: Loose }[]) => boolean) {
  const stream = new AbortController();
  const response = await fetch(`${origin}${path}`, { headers: { cookie }, signal: stream.signal });
  expect(response.headers.get("content-type")).toMatch(/text\/event-stream/);
  const reader = response.body!.getReader();
  let text = "";
  const seen: { event: string; data: Loose }[] = [];
  const deadline = Date.now() + 10_000;
  while (!until(seen) && Date.now() < deadline) {
    text += new TextDecoder().decode((await reader.read()).value);
    const blocks = text.split("\n\n");
    text = blocks.pop()!;
    for (const block of blocks) {
      const event = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (event && data) seen.push({ event, data: JSON.parse(data) as Loose });
    }
  }
  stream.abort();
  return seen;
}

test("the timeline streams the kinds, the last entries in words and escaped, then each new one", async () => {
  entries.push(entry("exec", { cmd: "printf '\u001b[2J<img src=x onerror=alert(1)>'", exitCode: 0, user: "root" }));
  entries.push(
    entry("egress", {
      host: "api.example.com",
      port: 443,
      protocol: "https",
      method: "GET",
      allowed: true,
      rule: "allowedHosts",
    }),
  );
  const later = setTimeout(() => entries.push(entry("secret", { secret: "API_TOKEN", host: "api.example.com" })), 300);
  const seen = await events("/api/audit?name=web", (s) => s.filter((e) => e.event === "entries").length >= 2);
  clearTimeout(later);
  expect(seen[0]).toEqual({ event: "kinds", data: { type: "kinds", kinds: [...LEDGER_KINDS] } });
  const batches = seen.filter((e) => e.event === "entries").map((e) => e.data.entries as Loose[]);
  expect(batches[0]!.map((e) => [e.seq, e.kind])).toEqual([
    [1, "exec"],
    [2, "egress"],
  ]);
  // Control characters escaped; the markup stays text for the page to add as text.
  expect(batches[0]![0]!.text).toContain("\\x1b[2J<img src=x onerror=alert(1)>");
  expect(batches[0]![0]!.text).not.toContain("\u001b");
  expect(batches[0]![1]!.text).toBe("allowed https GET api.example.com:443 (allowedHosts)");
  expect(batches[1]).toEqual([
    expect.objectContaining({ seq: 3, kind: "secret", text: "secret API_TOKEN put into a request to api.example.com" }),
  ]);
  // The first read asks for the last entries, the next ones only for what came after.
  expect(audits[0]).toMatchObject({ action: "audit", name: "web", last: 200 });
  expect(audits.slice(1).every((a) => a.cursor !== undefined)).toBe(true);
});

test("a kind filter reaches the audit action; an unknown name or kind is reported as a failure", async () => {
  audits.length = 0;
  const seen = await events("/api/audit?name=web&kind=egress", (s) => s.some((e) => e.event === "entries"));
  // (The first test's stream may still have had a read under way when it was closed.)
  expect(audits).toContainEqual(expect.objectContaining({ name: "web", kind: ["egress"] }));
  expect(seen.find((e) => e.event === "entries")!.data.entries.map((e: Loose) => e.kind)).toEqual(["egress"]);

  const failing = await startDashboardServer({
    call: async (input) => {
      if (input.action === "audit")
        throw Object.assign(new Error("no instance named gone"), { code: "CONTROLLER_NOT_FOUND" });
      return call(input);
    },
    key,
    log,
    pollMs: { active: 100, idle: 100 },
  });
  try {
    const base = `http://127.0.0.1:${failing.port}`;
    const own = await dashboardSession(base, key);
    const response = await fetch(`${base}/api/audit?name=gone`, { headers: { cookie: own } });
    const reader = response.body!.getReader();
    let text = "";
    while (!text.includes("event: failure")) text += new TextDecoder().decode((await reader.read()).value);
    await reader.cancel();
    expect(text).toContain("no instance named gone");
  } finally {
    await failing.close();
  }
});

test("without a session the timeline is refused", async () => {
  expect((await fetch(`${origin}/api/audit?name=web`)).status).toBe(403);
});

test("through a context each entry names the machine whose ledger holds it, escaped", () => {
  const far = { ...entry("exec", { cmd: "true", exitCode: 0, user: "root" }), machine: "far" };
  const here = { ...entry("action", { action: "exec", outcome: "refused" }), machine: "here\u001b[2J" };
  expect(timelineEntry(far)).toMatchObject({ machine: "far", kind: "exec" });
  expect(timelineEntry(here).machine).toBe("here\\x1b[2J");
  expect(timelineEntry(entry("exec", { cmd: "true", exitCode: 0, user: "root" }))).not.toHaveProperty("machine");
});
