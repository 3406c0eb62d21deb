// What this machine keeps of the calls it sends through a context, without ssh: a model's call
// refused here (the model guard, the user's no) is in this machine's ledger of the context and
// never leaves; each call's caller, instance, arguments (no secret value), outcome and duration,
// polls left out; `audit` merging both machines' entries by time, each saying which machine
// recorded it; `audit verify` naming this machine's ledger when it was changed; writers taking
// turns on its lock; and the secret sources of a create kept before it is sent.
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { callAction } from "../src/client/index.js";
import { entryLine, type AuditRead, type AuditVerdict } from "../src/actions/audit.js";
import { ControllerError } from "../src/errors.js";
import { auditThroughContext } from "../src/remote/audit-through.js";
import { outcomeOf, recordContextCall } from "../src/remote/laptop-ledger.js";
import { explainSecretUnavailable, keepAhead, sourcesOf } from "../src/remote/secret-sources.js";
import { StateLayout } from "../src/state/layout.js";
import { appendShared, readLedger, verifyLedger, type LedgerEntry } from "../src/state/ledger.js";
import { contextTestEnv } from "./support/context-env.js";

let base: string;
let env: NodeJS.ProcessEnv;
let ledgerDir: string;

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), "ctx-ledger-"));
  // An ssh that leaves a mark: nothing here may reach the other machine.
  await writeFile(join(base, "ssh"), `#!/bin/sh\ntouch ${join(base, "ssh-ran")}\nexit 255\n`, { mode: 0o755 });
  env = await contextTestEnv(base);
  ledgerDir = new StateLayout(env.PI_SANDBOX_HOME!).contextLedgerDir("far");
});

/** The context's directory in the state root, which recordContextCall makes when it first writes. */
const ensureContextDir = () => mkdir(dirname(ledgerDir), { recursive: true });

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

const entriesHere = () => readLedger(ledgerDir);
const exec = (name: string, cmd: string) => ({ action: "exec", name, cmd });

test("a model's call refused here is in this machine's ledger of the context with who said no, and never sent", async () => {
  const project = join(base, "project");
  await mkdir(project);
  await expect(
    callAction(
      { action: "egress-approve", name: "demo", host: "example.org" },
      { env, cwd: project, caller: "model", context: "far" },
    ),
  ).rejects.toMatchObject({ code: "CONTROLLER_USER_ONLY" });
  await writeFile(join(base, "outside.txt"), "x");
  await expect(
    callAction(
      { action: "upload", name: "demo", from: join(base, "outside.txt"), to: "/workspace/" },
      { env, cwd: project, caller: "model", context: "far", confirm: async () => false },
    ),
  ).rejects.toMatchObject({ code: "CONTROLLER_USER_DECLINED" });

  const seen = entriesHere().map((e) =>
    e.kind === "trust"
      ? [e.kind, e.data.action, e.data.name, e.data.answer, e.data.by]
      : [e.kind, e.data.action, e.data.name, e.data.caller, e.data.outcome],
  );
  expect(seen).toEqual([
    ["trust", "egress-approve", "demo", "no", "the controller: the action is for the user, never the model"],
    ["action", "egress-approve", "demo", "model", "CONTROLLER_USER_ONLY"],
    ["trust", "upload", "demo", "no", "the user, in Pi's dialog"],
    ["action", "upload", "demo", "model", "CONTROLLER_USER_DECLINED"],
  ]);
  expect(entriesHere().every((e) => e.data.context === "far")).toBe(true);
  expect(verifyLedger(ledgerDir)).not.toHaveProperty("broken");
  expect(verifyLedger(ledgerDir).entries).toBe(4);
  // Nothing went to the other machine, and no local instance's ledger was written.
  await expect(readFile(join(base, "ssh-ran"))).rejects.toMatchObject({ code: "ENOENT" });
  expect(readdirSync(join(base, "state"))).toEqual(["contexts"]);
});

test("a call is recorded with its caller, instance, arguments (names of secrets only), outcome and duration; polls are not", () => {
  const call = (args: Record<string, unknown>, outcome: string, result?: unknown) =>
    recordContextCall(env, { context: "far", args, caller: "cli", trust: [], outcome, ms: 12.4 }, result);
  call({ ...exec("demo", "make"), env: { TOKEN: "s3cret-value" } }, "ok");
  call({ action: "write", name: "demo", path: "/workspace/a", content: "s3cret-text" }, "ok");
  call({ action: "start", name: "demo" }, "CONTROLLER_SECRET_UNAVAILABLE");
  // Polls: the dashboard's list and egress watch, audit itself, logs -f, exec-status while the command runs.
  call({ action: "list" }, "ok");
  call({ action: "egress-watch", names: ["demo"], id: "page-1" }, "ok");
  call({ action: "egress", name: "demo", waiting: true }, "ok");
  call({ action: "audit", name: "demo" }, "ok");
  call({ action: "logs", name: "demo", service: "web", cursor: "3" }, "ok");
  call({ action: "exec-status", name: "demo", pid: "p1" }, "ok", { running: true });
  call({ action: "exec-status", name: "demo", pid: "p1" }, "ok", { running: false, exitCode: 0 });

  const entries = entriesHere();
  expect(entries.map((e) => [e.data.action, e.data.name, e.data.caller, e.data.outcome, e.data.ms])).toEqual([
    ["exec", "demo", "cli", "ok", 12],
    ["write", "demo", "cli", "ok", 12],
    ["start", "demo", "cli", "CONTROLLER_SECRET_UNAVAILABLE", 12],
    ["exec-status", "demo", "cli", "ok", 12],
  ]);
  expect(entries[0]!.data.args).toEqual({ cmd: "make", envNames: ["TOKEN"] });
  expect(entries[1]!.data.args).toMatchObject({ contentBytes: 11, contentSha256: expect.any(String) });
  const text = readdirSync(ledgerDir)
    .map((f) => readFileSync(join(ledgerDir, f), "utf8"))
    .join("");
  expect(text).not.toContain("s3cret");
  expect(entryLine(entries[0]!)).toMatch(/action +exec of demo by cli through context far: ok \(12 ms\)/);
  // Ctrl-C is said as such; another failure by its code.
  const stopped = AbortSignal.abort();
  expect(outcomeOf(new Error("interrupted"), stopped)).toBe("interrupted");
  expect(outcomeOf(new ControllerError("CONTROLLER_CONTEXT_LOST", "lost"))).toBe("CONTROLLER_CONTEXT_LOST");
});

/** A far side's ledger entry. */
function farEntry(seq: number, at: string, action: string): LedgerEntry {
  return {
    seq,
    at,
    kind: "action",
    data: { action, caller: "cli", from: "me@laptop", args: {}, outcome: "ok", ms: 1 },
    prev: "",
    hash: "",
  };
}

test("audit through a context shows both machines' entries by time, each saying which machine recorded it", async () => {
  await ensureContextDir();
  appendShared(
    ledgerDir,
    [{ kind: "action", data: { action: "exec", name: "demo", caller: "pi", context: "far", outcome: "ok" } }],
    new Date("2026-12-05T10:00:02Z"),
  );
  appendShared(
    ledgerDir,
    [{ kind: "action", data: { action: "exec", name: "other", context: "far", outcome: "ok" } }],
    new Date("2026-12-05T10:00:03Z"),
  );
  const sent: Record<string, unknown>[] = [];
  const far = (entries: LedgerEntry[], cursor: string) => async (args: Record<string, unknown>) => {
    sent.push(args);
    return { name: "demo", entries, cursor, more: false } satisfies AuditRead;
  };
  const read = (await auditThroughContext(
    "audit",
    { action: "audit", name: "demo" },
    "far",
    env,
    far([farEntry(7, "2026-12-05T10:00:01Z", "exec"), farEntry(8, "2026-12-05T10:00:04Z", "stop")], "8"),
  )) as AuditRead;
  expect(read.entries.map((e) => [e.machine, e.data.action])).toEqual([
    ["far", "exec"],
    ["here", "exec"],
    ["far", "stop"],
  ]);
  expect(read.context).toBe("far");
  // Past the other instance's entry too: a follower reads neither again.
  expect(read.cursor).toBe("8:2");
  expect(entryLine(read.entries[0]!)).toMatch(/^far +7 .* exec by cli via context from me@laptop: ok/);
  expect(entryLine(read.entries[1]!)).toMatch(/^here +1 .* exec of demo by pi through context far/);

  // A follower's next read: the far side is asked after its own position, this machine after its own.
  appendShared(ledgerDir, [{ kind: "action", data: { action: "stop", name: "demo", context: "far", outcome: "ok" } }]);
  const next = (await auditThroughContext(
    "audit",
    { action: "audit", name: "demo", cursor: read.cursor },
    "far",
    env,
    far([], "8"),
  )) as AuditRead;
  expect(sent.at(-1)).toMatchObject({ cursor: "8" });
  expect(next.entries.map((e) => [e.machine, e.seq])).toEqual([["here", 3]]);
  expect(next.cursor).toBe("8:3");
});

test("audit verify through a context checks this machine's ledger too, and names it when it was changed", async () => {
  const far = async () =>
    ({ name: "demo", ok: true, entries: 5, files: 1, lastHash: "f".repeat(64) }) satisfies AuditVerdict;
  for (const action of ["create", "exec", "stop"])
    recordContextCall(env, {
      context: "far",
      args: { action, name: "demo" },
      caller: "cli",
      trust: [],
      outcome: "ok",
      ms: 1,
    });
  const verdict = (await auditThroughContext(
    "audit-verify",
    { action: "audit-verify", name: "demo" },
    "far",
    env,
    far,
  )) as AuditVerdict;
  expect(verdict).toMatchObject({ entries: 5, context: "far", here: { entries: 3, files: 1 } });

  const file = join(
    ledgerDir,
    readdirSync(ledgerDir).find((f) => f.endsWith(".jsonl"))!,
  );
  const lines = readFileSync(file, "utf8").split("\n");
  lines[1] = lines[1]!.replace('"outcome":"ok"', '"outcome":"CONTROLLER_NOT_FOUND"');
  writeFileSync(file, lines.join("\n"));
  await expect(
    auditThroughContext("audit-verify", { action: "audit-verify", name: "demo" }, "far", env, far),
  ).rejects.toMatchObject({
    code: "CONTROLLER_LEDGER_BROKEN",
    message: expect.stringMatching(
      /^this machine's ledger of context far is broken at ledger-000001\.jsonl line 2 \(entry 2\): its content does not match its hash/,
    ),
  });

  // A break on the far side is said as that machine's.
  await writeFile(file, lines.join("\n").replace('"outcome":"CONTROLLER_NOT_FOUND"', '"outcome":"ok"'));
  const farBroken = async () => {
    throw new ControllerError(
      "CONTROLLER_LEDGER_BROKEN",
      "the ledger of demo is broken at ledger-000001.jsonl line 4",
      {
        hint: "Something other than pi-sandbox wrote /far/state/instances/demo/ledger.",
      },
    );
  };
  await expect(
    auditThroughContext("audit-verify", { action: "audit-verify", name: "demo" }, "far", env, farBroken),
  ).rejects.toMatchObject({
    message: "on context far, the ledger of demo is broken at ledger-000001.jsonl line 4",
    details: { context: "far" },
  });

  // The far side has no such instance (a create refused here): this machine's entries alone.
  const gone = async () => {
    throw new ControllerError("CONTROLLER_NOT_FOUND", "no instance named refused");
  };
  recordContextCall(env, {
    context: "elsewhere",
    args: { action: "create", name: "refused" },
    caller: "model",
    trust: [],
    outcome: "CONTROLLER_USER_DECLINED",
    ms: 0,
  });
  const alone = (await auditThroughContext(
    "audit",
    { action: "audit", name: "refused" },
    "elsewhere",
    env,
    gone,
  )) as AuditRead;
  expect(alone.entries.map((e) => [e.machine, e.data.outcome])).toEqual([["here", "CONTROLLER_USER_DECLINED"]]);
  await expect(
    auditThroughContext("audit", { action: "audit", name: "nothing" }, "elsewhere", env, gone),
  ).rejects.toMatchObject({
    code: "CONTROLLER_NOT_FOUND",
  });
});

test("a writer waits for another's lock and takes one left by a crash", async () => {
  await ensureContextDir();
  appendShared(ledgerDir, [{ kind: "action", data: { n: 1 } }]);
  const lock = join(ledgerDir, "ledger.lock");
  // Held by another process for 300 ms.
  writeFileSync(lock, "");
  spawn("sh", ["-c", `sleep 0.3; rm -f ${lock}`], { stdio: "ignore" });
  const started = Date.now();
  appendShared(ledgerDir, [{ kind: "action", data: { n: 2 } }]);
  expect(Date.now() - started).toBeGreaterThanOrEqual(250);
  // Left by a writer that died holding it.
  writeFileSync(lock, "");
  const old = new Date(Date.now() - 60_000);
  spawn("touch", ["-d", old.toISOString(), lock]);
  return new Promise<void>((resolve) => setTimeout(resolve, 200)).then(() => {
    appendShared(ledgerDir, [{ kind: "action", data: { n: 3 } }]);
    expect(readLedger(ledgerDir).map((e) => [e.seq, e.data.n])).toEqual([
      [1, 1],
      [2, 2],
      [3, 3],
    ]);
    expect(verifyLedger(ledgerDir).broken).toBeUndefined();
  });
});

test("a create's secret sources are kept before it is sent: an interrupted one leaves them, a taken name keeps its own", async () => {
  const entry = [{ kind: "instances" as const, name: "demo" }];
  // An earlier create of demo, then a second create of the same name: the far side says it is taken.
  await keepAhead(env, "far", entry, { PI_SANDBOX_CONTEXT_SECRET_0: "env:FIRST" });
  const undo = await keepAhead(env, "far", entry, { PI_SANDBOX_CONTEXT_SECRET_0: "env:SECOND" });
  expect(await sourcesOf(env, "far", "instances", "demo")).toEqual({ PI_SANDBOX_CONTEXT_SECRET_0: "env:SECOND" });
  const taken = new ControllerError("CONTROLLER_ALREADY_EXISTS", "demo exists");
  await expect(undo(taken)).rejects.toBe(taken);
  expect(await sourcesOf(env, "far", "instances", "demo")).toEqual({ PI_SANDBOX_CONTEXT_SECRET_0: "env:FIRST" });
  // Ctrl-C (or a lost connection): the create may go on there, so what it needs stays.
  const interrupted = await keepAhead(env, "far", [{ kind: "instances", name: "next" }], { V: "env:NEXT" });
  await expect(interrupted(new Error("interrupted"))).rejects.toThrow("interrupted");
  expect(await sourcesOf(env, "far", "instances", "next")).toEqual({ V: "env:NEXT" });
});

test("a start whose secret this machine cannot send says why here: the source here, or none kept", async () => {
  const farSays = new ControllerError(
    "CONTROLLER_SECRET_UNAVAILABLE",
    "secret TOKEN (from env:PI_SANDBOX_CONTEXT_SECRET_0): the host environment variable PI_SANDBOX_CONTEXT_SECRET_0 is not set",
    { details: { secret: "TOKEN", from: "env:PI_SANDBOX_CONTEXT_SECRET_0" } },
  );
  const args = { action: "start", name: "demo" };
  await expect(explainSecretUnavailable(farSays, {}, env, "far", args)).resolves.toMatchObject({
    code: "CONTROLLER_SECRET_UNAVAILABLE",
    message: expect.stringContaining(
      "secret TOKEN of demo is read on this machine and sent to context far, but this machine does not know where from",
    ),
    hint: expect.stringContaining("pi-sandbox destroy demo --context far"),
  });
  const unset = { PI_SANDBOX_CONTEXT_SECRET_0: "env:PISB_TEST_UNSET_TOKEN" };
  await expect(explainSecretUnavailable(farSays, unset, env, "far", args)).resolves.toMatchObject({
    code: "CONTROLLER_SECRET_UNAVAILABLE",
    message: expect.stringContaining("could not be read on this machine from its source (env:PISB_TEST_UNSET_TOKEN)"),
  });
  const other = new ControllerError("CONTROLLER_NOT_FOUND", "no instance");
  await expect(explainSecretUnavailable(other, {}, env, "far", args)).resolves.toBe(other);
});
