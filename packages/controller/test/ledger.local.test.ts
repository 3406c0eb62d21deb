// The ledger as a user reads it, through the client and real (in-process) daemons over the local
// runtime: each call's action with its caller and outcome, lifecycle, execs and transfers; a
// canary secret's value nowhere in it; `audit verify` holding, then naming a tampered entry; the
// ledger of a destroyed instance still readable.
import { createHash } from "node:crypto";
import { mkdir, readdir, readFile, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction } from "../src/client/index.js";
import { entryLine } from "../src/actions/audit.js";
import { StateLayout } from "../src/state/layout.js";
import { pruneKeptLedgers } from "../src/state/ledger-keep.js";
import { createLocalRuntime } from "../src/testing.js";
import { inProcessDaemons, type InProcessDaemons } from "./support/in-process-daemon.js";
import type { Loose } from "./support/local-daemon.js";

const CANARY = "canary-7f3a9c1e5b2d4f60";
let dir: string;
let env: NodeJS.ProcessEnv;
let layout: StateLayout;
let daemons: InProcessDaemons;

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");
const call = (action: Loose) => callAction(action, { env, cwd: dir }) as Promise<Loose>;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-ledger-"));
  env = { ...process.env, PI_SANDBOX_HOME: join(dir, "state"), LEDGER_CANARY: CANARY };
  process.env.LEDGER_CANARY = CANARY;
  layout = new StateLayout(env.PI_SANDBOX_HOME!);
  await layout.ensurePrivate();
  await writeFile(
    join(dir, "sandbox.yaml"),
    "version: 1\nprofile: tiny\ndiskGiB: 4\nnetwork:\n  allowedHosts: [api.example.com]\n  secrets:\n    API_TOKEN: { from: 'env:LEDGER_CANARY', hosts: [api.example.com] }\n",
  );
  daemons = inProcessDaemons(layout);
  await daemons.start("web", createLocalRuntime());
});

afterAll(async () => {
  await call({ action: "stop", name: "web" }).catch(() => undefined);
  await daemons.exited();
  delete process.env.LEDGER_CANARY;
  await rm(dir, { recursive: true, force: true });
});

test("every call, exec and transfer is recorded with its caller and outcome; the secret's value is not", async () => {
  await call({ action: "create", name: "web", config: "sandbox.yaml" });
  const exec = await call({ action: "exec", name: "web", cmd: "printf hello; echo $API_TOKEN > token.txt" });
  expect(exec.exitCode).toBe(0);
  const note = `${(await call({ action: "exec", name: "web", cmd: "pwd" })).output.trim()}/note.txt`;
  await call({ action: "write", name: "web", path: note, content: "a note\n" });
  await call({ action: "download", name: "web", from: note, to: join(dir, "note.txt") });
  await mkdir(join(dir, "tree"));
  await writeFile(join(dir, "tree", "a.txt"), "first\n");
  await writeFile(join(dir, "tree", "b.txt"), "second\n");
  const tree = await call({ action: "upload", name: "web", from: join(dir, "tree"), to: "tree" });
  await expect(call({ action: "exec", name: "web", cmd: "exit 3" })).resolves.toMatchObject({ exitCode: 3 });
  const kept = await call({ action: "checkpoint", name: "web", label: "before" });
  await call({ action: "rewind", name: "web", checkpoint: "before" });
  await expect(call({ action: "read", name: "web", path: "missing.txt" })).rejects.toMatchObject({
    code: expect.any(String),
  });

  const read = await call({ action: "audit", name: "web", last: 1000 });
  const entries = read.entries as Loose[];
  const actions = entries.filter((e) => e.kind === "action").map((e) => [e.data.action, e.data.caller, e.data.outcome]);
  expect(actions).toEqual([
    ["create", "library", "ok"],
    ["exec", "library", "ok"],
    ["exec", "library", "ok"],
    ["write", "library", "ok"],
    ["download", "library", "ok"],
    ["upload", "library", "ok"],
    ["exec", "library", "ok"],
    ["checkpoint", "library", "ok"],
    ["rewind", "library", "ok"],
    ["read", "library", expect.stringMatching(/^[A-Z_]+$/)],
  ]);
  expect(entries.filter((e) => e.kind === "lifecycle" && e.data.event).map((e) => e.data)).toEqual([
    { event: "checkpoint kept", checkpoint: { id: kept.checkpoint.id, label: "before", kind: "disk" } },
    expect.objectContaining({
      event: "rewound",
      checkpoint: { id: kept.checkpoint.id, label: "before", kind: "disk" },
    }),
  ]);
  expect(entries.filter((e) => e.kind === "lifecycle").map((e) => e.data.state)).toEqual(
    expect.arrayContaining(["starting", "running"]),
  );
  const execs = entries.filter((e) => e.kind === "exec").map((e) => e.data);
  expect(execs).toEqual([
    expect.objectContaining({
      cmd: "printf hello; echo $API_TOKEN > token.txt",
      cwd: null,
      user: "root",
      exitCode: 0,
      outputBytes: 5,
      durationMs: expect.any(Number),
    }),
    expect.objectContaining({ cmd: "pwd", exitCode: 0 }),
    expect.objectContaining({ cmd: "exit 3", exitCode: 3 }),
  ]);
  const transfers = entries.filter((e) => e.kind === "transfer").map((e) => e.data);
  expect(transfers).toEqual([
    expect.objectContaining({
      direction: "upload",
      to: note,
      bytes: 7,
      sha256: expect.stringMatching(/^[0-9a-f]{64}$/),
    }),
    expect.objectContaining({ direction: "download", files: 1, bytes: 7, sha256: transfers[0]!.sha256 }),
    // A tree: both ends, its files and bytes, and the sha256 of its files' list as sha256sum prints it.
    {
      direction: "upload",
      from: join(dir, "tree"),
      to: tree.to,
      files: 2,
      bytes: 13,
      treeSha256: sha256(`${sha256("first\n")}  ${tree.to}/a.txt\n${sha256("second\n")}  ${tree.to}/b.txt\n`),
    },
  ]);
  // The write's text is not kept, only its size and hash.
  expect(JSON.stringify(entries)).not.toContain("a note");
  // Sequence numbers run on without a gap; the text form is one line each.
  expect(entries.map((e) => e.seq)).toEqual(entries.map((_, i) => i + 1));
  expect(entries.map((e) => entryLine(e as never)).every((line) => !line.includes("\n"))).toBe(true);
  // The secret's value: nowhere in the ledger's files (the guest only ever had its placeholder).
  const ledgerDir = layout.ledgerDir("instances", "web");
  for (const file of await readdir(ledgerDir))
    expect(await readFile(join(ledgerDir, file), "utf8")).not.toContain(CANARY);
  // A follower's cursor: nothing new after the last read.
  const again = await call({ action: "audit", name: "web", cursor: read.cursor });
  expect(again.entries).toEqual([]);
});

test("a model's call is recorded as the model's, with the user's yes to it", async () => {
  const outside = await mkdtemp(join(tmpdir(), "pisb-ledger-out-"));
  try {
    const note = `${(await call({ action: "exec", name: "web", cmd: "pwd" })).output.trim()}/note.txt`;
    const asked: string[] = [];
    await callAction(
      { action: "download", name: "web", from: note, to: join(outside, "note.txt") },
      {
        env,
        cwd: dir,
        caller: "model",
        confirm: async (request) => (asked.push(request.message), true),
      },
    );
    expect(asked).toHaveLength(1);
    const entries = (await call({ action: "audit", name: "web", kind: ["trust", "action"], last: 2 }))
      .entries as Loose[];
    expect(entries[0]).toMatchObject({
      kind: "trust",
      data: {
        action: "download",
        answer: "yes",
        by: "the user, in Pi's dialog",
        asked: expect.arrayContaining([expect.stringContaining("Target:")]),
      },
    });
    expect(entries[1]).toMatchObject({ kind: "action", data: { action: "download", caller: "model", outcome: "ok" } });
  } finally {
    await rm(outside, { recursive: true, force: true });
  }
});

test("a model's call refused before it is sent is recorded too: the user's no, nobody to ask, never for a model", async () => {
  const outside = await mkdtemp(join(tmpdir(), "pisb-ledger-out-"));
  try {
    const note = `${(await call({ action: "exec", name: "web", cmd: "pwd" })).output.trim()}/note.txt`;
    const download = { action: "download", name: "web", from: note, to: join(outside, "note.txt") };
    const before = (await call({ action: "audit", name: "web", last: 1 })).cursor;
    await expect(
      callAction(download, { env, cwd: dir, caller: "model", confirm: async () => false }),
    ).rejects.toMatchObject({ code: "CONTROLLER_USER_DECLINED" });
    // No UI: nobody could be asked.
    await expect(callAction(download, { env, cwd: dir, caller: "model" })).rejects.toMatchObject({
      code: "CONTROLLER_CONFIRMATION_REQUIRED",
    });
    await expect(
      callAction({ action: "shell", name: "web" }, { env, cwd: dir, caller: "model" }),
    ).rejects.toMatchObject({
      code: "CONTROLLER_USER_ONLY",
    });
    const entries = (await call({ action: "audit", name: "web", cursor: before })).entries as Loose[];
    const seen = entries.map((e) =>
      e.kind === "trust"
        ? ["trust", e.data.action, e.data.answer, e.data.by]
        : [e.kind, e.data.action, e.data.caller, e.data.outcome],
    );
    expect(seen).toEqual([
      // The download reaches the daemon, which finds its plan needs a yes; the user then says no.
      ["action", "download", "model", "CONTROLLER_CONFIRMATION_REQUIRED"],
      ["trust", "download", "no", "the user, in Pi's dialog"],
      ["action", "download", "model", "CONTROLLER_USER_DECLINED"],
      ["action", "download", "model", "CONTROLLER_CONFIRMATION_REQUIRED"],
      ["trust", "download", "no", "nobody: Pi has no UI here to ask the user"],
      ["action", "download", "model", "CONTROLLER_CONFIRMATION_REQUIRED"],
      ["trust", "shell", "no", "the controller: the action is for the user, never the model"],
      ["action", "shell", "model", "CONTROLLER_USER_ONLY"],
    ]);
    // Nothing was written, and nothing ran.
    expect(await readdir(outside)).toEqual([]);
    expect(entries.some((e) => e.kind === "transfer")).toBe(false);
    expect(entries.find((e) => e.kind === "trust")!.data.asked).toEqual(
      expect.arrayContaining([expect.stringContaining(`Target: ${join(outside, "note.txt")}`)]),
    );
  } finally {
    await rm(outside, { recursive: true, force: true });
  }
});

test("a call that came over a context is recorded as the laptop's caller's, from the laptop; a model's call to a user-only action stays refused here", async () => {
  const before = (await call({ action: "audit", name: "web", last: 1 })).cursor;
  const relayed = (caller: "model" | "cli") => ({
    env,
    cwd: dir,
    caller: "user" as const,
    relayed: { caller, from: "me@laptop" },
  });
  await callAction({ action: "exec", name: "web", cmd: "true" }, relayed("model"));
  await callAction({ action: "exec", name: "web", cmd: "true" }, relayed("cli"));
  // The laptop would refuse it first; this machine does too, whatever the laptop let through.
  await expect(
    callAction({ action: "egress-approve", name: "web", host: "example.org" }, relayed("model")),
  ).rejects.toMatchObject({ code: "CONTROLLER_USER_ONLY" });
  const entries = (await call({ action: "audit", name: "web", cursor: before, kind: ["action"] })).entries as Loose[];
  expect(entries.map((e) => [e.data.action, e.data.caller, e.data.from, e.data.outcome])).toEqual([
    ["exec", "model", "me@laptop", "ok"],
    ["exec", "cli", "me@laptop", "ok"],
    ["egress-approve", "model", "me@laptop", "CONTROLLER_USER_ONLY"],
  ]);
  expect(entryLine(entries[0] as never)).toMatch(/exec by model via context from me@laptop: ok/);
});

test("audit verify holds, then names the entry that was changed", async () => {
  const ok = await call({ action: "audit-verify", name: "web" });
  expect(ok).toMatchObject({
    ok: true,
    entries: expect.any(Number),
    lastHash: expect.stringMatching(/^[0-9a-f]{64}$/),
  });
  const ledgerDir = layout.ledgerDir("instances", "web");
  const [file] = (await readdir(ledgerDir)).sort();
  const lines = (await readFile(join(ledgerDir, file!), "utf8")).split("\n");
  const at = lines.findIndex((line) => line.includes('"caller":"library"'));
  lines[at] = lines[at]!.replace('"caller":"library"', '"caller":"cli"');
  await writeFile(join(ledgerDir, file!), lines.join("\n"));
  await expect(call({ action: "audit-verify", name: "web" })).rejects.toMatchObject({
    code: "CONTROLLER_LEDGER_BROKEN",
    details: { seq: at + 1, line: at + 1, reason: expect.stringContaining("changed") },
  });
  lines[at] = lines[at]!.replace('"caller":"cli"', '"caller":"library"');
  await writeFile(join(ledgerDir, file!), lines.join("\n"));
  expect((await call({ action: "audit-verify", name: "web" })).ok).toBe(true);
});

test("a destroyed instance's ledger is kept: audit reads it, its last entry the destroy", async () => {
  await call({ action: "destroy", name: "web", confirm: "web" });
  const read = await call({ action: "audit", name: "web" });
  expect(read.destroyed).toMatch(/^[0-9TZ]+$/);
  expect(read.entries.slice(-2)).toEqual([
    expect.objectContaining({ kind: "lifecycle", data: { state: "destroyed" } }),
    expect.objectContaining({ kind: "action", data: expect.objectContaining({ action: "destroy", outcome: "ok" }) }),
  ]);
  expect(await readdir(layout.kindDir("instances")).catch(() => [])).toEqual([]);
  expect((await call({ action: "audit-verify", name: "web" })).ok).toBe(true);
});

test("ledger.keepDestroyed: off keeps nothing after the destroy; a number of days keeps it until a later destroy after that", async () => {
  const config = (keep: string) => {
    const path = join(dir, `keep-${keep}.yaml`);
    return writeFile(path, `version: 1\nprofile: tiny\ndiskGiB: 4\nledger:\n  keepDestroyed: ${keep}\n`).then(
      () => path,
    );
  };
  await daemons.start("brief", createLocalRuntime());
  await call({ action: "create", name: "brief", config: await config("off") });
  await call({ action: "exec", name: "brief", cmd: "true" });
  await call({ action: "destroy", name: "brief", confirm: "brief" });
  await expect(call({ action: "audit", name: "brief" })).rejects.toMatchObject({ code: "CONTROLLER_NOT_FOUND" });
  expect((await readdir(layout.keptLedgersDir("instances"))).filter((n) => n.startsWith("brief."))).toEqual([]);

  await daemons.start("week", createLocalRuntime());
  await call({ action: "create", name: "week", config: await config("7") });
  await call({ action: "destroy", name: "week", confirm: "week" });
  const kept = (await call({ action: "audit", name: "week" })) as Loose;
  expect(kept.entries.at(-1).data).toMatchObject({ action: "destroy", outcome: "ok" });
  const [keptDir] = (await readdir(layout.keptLedgersDir("instances"))).filter((n) => n.startsWith("week."));
  const until = Date.parse(
    await readFile(join(layout.keptLedgersDir("instances"), keptDir!, "keep-until"), "utf8").then((t) => t.trim()),
  );
  expect(until - Date.now()).toBeGreaterThan(6.9 * 24 * 3_600_000);
  expect(until - Date.now()).toBeLessThanOrEqual(7 * 24 * 3_600_000);
  // Eight days later, the next destroy removes it; one kept forever (web's, above) stays.
  expect(await pruneKeptLedgers(layout, "instances", new Date(until - 1000))).toEqual([]);
  expect(await pruneKeptLedgers(layout, "instances", new Date(until + 24 * 3_600_000))).toEqual([
    join(layout.keptLedgersDir("instances"), keptDir!),
  ]);
  await expect(call({ action: "audit", name: "week" })).rejects.toMatchObject({ code: "CONTROLLER_NOT_FOUND" });
  expect((await call({ action: "audit", name: "web" })).destroyed).toBeDefined();
});
