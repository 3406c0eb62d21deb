// The environment moving with the conversation, in an in-process Pi session (SDK, faux model) with
// a fake controller client and a UI that answers selects: one checkpoint per run that changes the
// attached instance, labelled with the run's user message; none for a run that only looks; none
// when nothing ran since a rewind to the same point; /tree asking, keeping the tip it leaves and
// rewinding; /fork forking (the checkpoint of the point it goes to, made only once the new session
// starts: a /fork another extension cancels leaves nothing) and the new session attaching to the
// fork; print mode asking nothing; a failing checkpoint told once without failing the turn.

import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fauxAssistantMessage, fauxToolCall } from "@earendil-works/pi-ai";
import type { ExtensionFactory, ExtensionUIContext } from "@earendil-works/pi-coding-agent";
import { ControllerError, type CallActionOptions } from "@pi-sandbox/controller/client";
import type { CheckpointInfo } from "../src/branch-points.js";
import { FORK_CHOICES, REWIND_CHOICES } from "../src/branching.js";
import { callSandbox, done, startSdkSession, type SdkSession } from "./support/sdk-session.js";
import type { Json } from "./support/pi-harness.js";

const sessions: SdkSession[] = [];
let stateRoot = "";
let told: string[] = [];
const realWrite = process.stderr.write.bind(process.stderr);
beforeEach(async () => {
  stateRoot = await mkdtemp(join(tmpdir(), "psb-"));
  // The footer only looks at a state root that exists.
  await mkdir(join(stateRoot, "instances"));
  told = [];
  process.stderr.write = ((chunk: string | Uint8Array) => {
    told.push(String(chunk));
    return true;
  }) as typeof process.stderr.write;
});
afterEach(async () => {
  process.stderr.write = realWrite;
  for (const s of sessions.splice(0)) {
    // Ends the footer's timer, as Pi does before it lets a session go.
    await s.session.extensionRunner.emit({ type: "session_shutdown", reason: "quit" });
    await s.close();
  }
  await rm(stateRoot, { recursive: true, force: true });
});

const bash = (command: string) => fauxAssistantMessage(fauxToolCall("bash", { command }), { stopReason: "toolUse" });

/** A controller with running instances that keeps checkpoints in a list. */
function fakeController() {
  const state = {
    calls: [] as Json[],
    checkpoints: [] as CheckpointInfo[],
    failCheckpoint: false,
    failFork: false,
    instances: ["demo"],
  };
  let n = 0;
  const keep = (label: string): CheckpointInfo => {
    n += 1;
    const c: CheckpointInfo = {
      id: n.toString(16).padStart(12, "0"),
      label,
      pinned: false,
      createdAt: new Date(Date.UTC(2026, 0, 1, 0, 0, n)).toISOString(),
      kind: "disk",
      bytes: 1024,
    };
    state.checkpoints.push(c);
    return c;
  };
  const callAction = async (input: unknown, _options: CallActionOptions) => {
    const action = (typeof input === "string" ? JSON.parse(input) : input) as Json;
    if (action.action !== "list" && action.action !== "dashboard") state.calls.push(action);
    switch (action.action) {
      case "list":
        return { instances: state.instances.map((name) => ({ name, state: "running", previews: [] })) };
      case "exec":
        if (String(action.cmd).startsWith("pwd\n"))
          return { pid: "1", running: false, exitCode: 0, output: "/workspace\nfd=fdfind\n", truncatedBytes: 0 };
        return { pid: "2", running: false, exitCode: 0, output: "ok\n", truncatedBytes: 0 };
      case "checkpoint":
        if (state.failCheckpoint)
          throw new ControllerError("CONTROLLER_INTERNAL", "the disk is full", { hint: "Free some space." });
        return { name: action.name, checkpoint: keep(action.label), pruned: [] };
      case "checkpoints":
        return { name: action.name, checkpoints: [...state.checkpoints], bytes: state.checkpoints.length * 1024 };
      case "rewind": {
        const rewound = state.checkpoints.find((c) => c.id === action.checkpoint)!;
        const before = keep(`before rewind to ${rewound.label}`);
        return { name: action.name, state: "running", previews: [], rewound, before };
      }
      case "checkpoint-rm": {
        const removed = state.checkpoints.find((c) => c.id === action.checkpoint)!;
        state.checkpoints = state.checkpoints.filter((c) => c !== removed);
        return { name: action.name, removed };
      }
      case "fork":
        if (state.failFork)
          throw new ControllerError("CONTROLLER_ALREADY_EXISTS", "an instance named x already exists", {
            hint: "Pick.",
          });
        state.instances.push(...(action.names as string[]));
        return {
          source: action.name,
          forks: (action.names as string[]).map((name) => ({ name, kind: "memory" })),
          started: [],
        };
      default:
        throw new ControllerError("CONTROLLER_BAD_INPUT", `unexpected ${JSON.stringify(action)}`);
    }
  };
  return { state, callAction };
}

/** A UI that answers selects from `answers` in turn and records what it was shown. */
function fakeUI(answers: (string | undefined)[]) {
  const shown = {
    selects: [] as { title: string; options: string[] }[],
    notes: [] as { message: string; level: string }[],
  };
  const noop = () => undefined;
  // A plain object: Pi copies the UI context, so a Proxy's methods would not survive.
  const ui = {
    select: async (title: string, options: string[]) => {
      shown.selects.push({ title, options });
      return answers.shift();
    },
    notify: (message: string, level = "info") => void shown.notes.push({ message, level }),
    confirm: async () => false,
    input: async () => undefined,
    ...Object.fromEntries(
      [
        "onTerminalInput",
        "setStatus",
        "setWorkingMessage",
        "setWorkingVisible",
        "setWorkingIndicator",
        "setHiddenThinkingLabel",
        "setWidget",
        "setFooter",
        "setHeader",
        "setTitle",
        "custom",
        "pasteToEditor",
        "setEditorText",
        "getEditorText",
        "editor",
        "addAutocompleteProvider",
        "setEditorComponent",
        "getEditorComponent",
        "getAllThemes",
        "getTheme",
        "setTheme",
        "getToolsExpanded",
        "setToolsExpanded",
      ].map((key) => [key, noop]),
    ),
  } as unknown as ExtensionUIContext;
  return { ui, shown };
}

async function start(
  controller: ReturnType<typeof fakeController>,
  responses: Parameters<typeof startSdkSession>[1],
  answers?: (string | undefined)[],
  attach = true,
  extensions: ExtensionFactory[] = [],
) {
  const s = await startSdkSession(controller.callAction, responses, {
    env: { PI_SANDBOX_HOME: stateRoot },
    extensions,
  });
  sessions.push(s);
  const ui = answers ? fakeUI(answers) : undefined;
  await s.session.bindExtensions(ui ? { uiContext: ui.ui, mode: "rpc" } : {});
  if (attach) await s.session.prompt("/sandbox attach demo");
  return { s, shown: ui?.shown };
}

const userEntry = (s: SdkSession, text: string) =>
  s.session.sessionManager
    .getEntries()
    .filter((e) => e.type === "message" && e.message.role === "user")
    .find((e) => JSON.stringify((e as { message: { content: unknown } }).message.content).includes(`"${text}"`))!;
const of = (c: ReturnType<typeof fakeController>, action: string) => c.state.calls.filter((a) => a.action === action);

test("one checkpoint per run that changes the instance, labelled with its message; /tree rewinds and keeps the tip", async () => {
  const c = fakeController();
  const answers: (string | undefined)[] = [];
  const { s, shown } = await start(
    c,
    [
      bash("echo 1 > f"),
      done,
      bash("echo 2 > f"),
      bash("echo 3 > g"),
      done,
      callSandbox({ action: "list" }),
      done,
      bash("echo 4 > f"),
      done,
      bash("echo 2b > f"),
      done,
    ],
    answers,
  );
  await s.session.prompt("first");
  await s.session.prompt("second");
  await s.session.prompt("third");
  await s.session.prompt("fourth");
  const [u1, u2, u4] = ["first", "second", "fourth"].map((t) => userEntry(s, t).id) as [string, string, string];
  expect(of(c, "checkpoint")).toEqual([
    { action: "checkpoint", name: "demo", label: `pi:${u1}` },
    { action: "checkpoint", name: "demo", label: `pi:${u2}` },
    { action: "checkpoint", name: "demo", label: `pi:${u4}` },
  ]);
  // Each checkpoint came before its run's first change in the guest.
  const order = c.state.calls.filter((a) => a.action === "checkpoint" || (a.action === "exec" && a.cmd !== undefined));
  expect(order.map((a) => a.action).slice(1, 4)).toEqual(["checkpoint", "exec", "checkpoint"]);

  // /tree to "second": the leaf goes before it; the checkpoint taken before that turn holds it.
  const tip = s.session.sessionManager.getLeafId();
  const second = c.state.checkpoints[1]!;
  answers.push(REWIND_CHOICES[0]);
  const moved = await s.session.navigateTree(u2);
  expect(moved.cancelled).toBe(false);
  expect(shown!.selects).toEqual([
    {
      title: `Rewind the environment demo to this point too? (checkpoint ${second.id}, before "second")`,
      options: [...REWIND_CHOICES],
    },
  ]);
  // The tip being left is kept first, then the rewind; the controller's own copy of the tip goes.
  expect(c.state.calls.slice(-4)).toEqual([
    { action: "checkpoints", name: "demo" },
    { action: "checkpoint", name: "demo", label: `pi:${tip}` },
    { action: "rewind", name: "demo", checkpoint: second.id },
    { action: "checkpoint-rm", name: "demo", checkpoint: "000000000005" },
  ]);
  expect(c.state.checkpoints.map((k) => k.label)).toEqual([`pi:${u1}`, `pi:${u2}`, `pi:${u4}`, `pi:${tip}`]);
  expect(shown!.notes.at(-1)).toEqual({
    message: `Rewound demo to checkpoint ${second.id} (before "second").`,
    level: "info",
  });

  // A new run from there: nothing ran since the rewind, so no checkpoint.
  const kept = of(c, "checkpoint").length;
  await s.session.prompt("second again");
  expect(of(c, "checkpoint")).toHaveLength(kept);

  // Back to the old tip, keeping the environment: asked, the tip of the new branch kept, no rewind.
  answers.push(REWIND_CHOICES[1]);
  const tip2 = s.session.sessionManager.getLeafId();
  await s.session.navigateTree(tip!);
  expect(shown!.selects.at(-1)!.title).toBe(
    `Rewind the environment demo to this point too? (checkpoint ${c.state.checkpoints[3]!.id}, after "fourth")`,
  );
  expect(of(c, "checkpoint").at(-1)).toEqual({ action: "checkpoint", name: "demo", label: `pi:${tip2}` });
  expect(of(c, "rewind")).toHaveLength(1);

  // /sandbox checkpoints lists them by turn.
  await s.session.prompt("/sandbox checkpoints");
  const listing = shown!.notes.at(-1)!.message;
  expect(listing).toMatch(/^Checkpoints of demo, oldest first \(0\.0 MiB beyond its disk\):\n/);
  expect(
    listing
      .split("\n")
      .slice(1)
      .map((l) => l.replace(/^ {2}[0-9a-f]{12} {2}.*? {2}disk {2}/, "")),
  ).toEqual(['before "first"', 'before "second"', 'before "fourth"', 'after "fourth"', 'after "second again"']);
});

test("with a UI, the sandbox tool's changes get checkpoints too, and /tree offers that instance", async () => {
  const c = fakeController();
  const answers: (string | undefined)[] = [];
  const exec = (cmd: string) => callSandbox({ action: "exec", name: "web", cmd });
  const { s, shown } = await start(
    c,
    [
      exec("touch a"),
      exec("touch b"),
      done,
      callSandbox({ action: "inspect", name: "web" }),
      done,
      exec("touch c"),
      done,
    ],
    answers,
    false,
  );
  await s.session.prompt("make a and b");
  await s.session.prompt("look");
  await s.session.prompt("make c");
  expect(of(c, "checkpoint")).toEqual([
    { action: "checkpoint", name: "web", label: `pi:${userEntry(s, "make a and b").id}` },
    { action: "checkpoint", name: "web", label: `pi:${userEntry(s, "make c").id}` },
  ]);
  answers.push(undefined); // dismissed: the environment stays
  await s.session.navigateTree(userEntry(s, "make c").id);
  expect(shown!.selects.map((q) => q.title)).toEqual([
    `Rewind the environment web to this point too? (checkpoint ${c.state.checkpoints[1]!.id}, before "make c")`,
  ]);
  expect(of(c, "rewind")).toEqual([]);
});

test("/fork while attached: the fork is made when the new session starts, which attaches to it; keep and failure", async () => {
  const c = fakeController();
  const answers: (string | undefined)[] = [FORK_CHOICES[1]];
  const { s, shown } = await start(c, [], answers);
  const runner = s.session.extensionRunner;
  const leaf = s.session.sessionManager.getLeafId()!;
  // Keep: no fork.
  expect(await runner.emit({ type: "session_before_fork", entryId: leaf, position: "at" })).toBeUndefined();
  expect(shown!.selects[0]).toEqual({
    title: "Fork the environment demo for the new session? Without a fork, both sessions work in demo.",
    options: [...FORK_CHOICES],
  });
  await runner.emit({ type: "session_start", reason: "fork" });
  expect(of(c, "fork")).toEqual([]);

  // Fork: nothing is made until the new session starts; then one new instance, which it attaches to.
  answers.push(FORK_CHOICES[0]);
  expect(await runner.emit({ type: "session_before_fork", entryId: leaf, position: "before" })).toBeUndefined();
  expect(shown!.selects[1]!.title).toContain("(as it is now, with what later turns changed)");
  expect(of(c, "fork")).toEqual([]);
  await runner.emit({ type: "session_start", reason: "fork" });
  const [fork] = of(c, "fork");
  expect(fork).toEqual({ action: "fork", name: "demo", names: [expect.stringMatching(/^demo-[0-9a-f]{6}$/)] });
  const forkName = (fork!.names as string[])[0]!;
  expect(of(c, "exec").at(-1)).toMatchObject({ name: forkName });
  expect(shown!.notes.at(-1)!.message).toMatch(
    new RegExp(`^Attached to ${forkName} \\(a fork of demo made for this session\\): read, bash`),
  );
  // A later fork-start without a fork asked for restores as usual (nothing is handed over twice).
  await runner.emit({ type: "session_start", reason: "fork" });
  expect(of(c, "fork")).toHaveLength(1);

  // A fork that fails leaves the new session unattached, saying why.
  c.state.failFork = true;
  answers.push(FORK_CHOICES[0]);
  expect(await runner.emit({ type: "session_before_fork", entryId: leaf, position: "at" })).toBeUndefined();
  await runner.emit({ type: "session_start", reason: "fork" });
  expect(shown!.notes.at(-1)).toMatchObject({ level: "error" });
  expect(shown!.notes.at(-1)!.message).toMatch(
    /^CONTROLLER_ALREADY_EXISTS: .*\nNo fork was made; this session is not attached to an instance/s,
  );
});

test("/fork to an earlier message forks the checkpoint of that point; /clone at the tip forks the instance now", async () => {
  const c = fakeController();
  const answers: (string | undefined)[] = [];
  const { s, shown } = await start(c, [bash("echo 1 > f"), done, bash("echo 2 > f"), done], answers);
  await s.session.prompt("first");
  await s.session.prompt("second");
  const runner = s.session.extensionRunner;
  // /fork at "second": the new session starts before it, which the checkpoint taken before that turn holds.
  const second = c.state.checkpoints.find((k) => k.label === `pi:${userEntry(s, "second").id}`)!;
  answers.push(FORK_CHOICES[0]);
  await runner.emit({ type: "session_before_fork", entryId: userEntry(s, "second").id, position: "before" });
  expect(shown!.selects.at(-1)!.title).toBe(
    `Fork the environment demo for the new session as it was at this point (checkpoint ${second.id}, before "second")? Without a fork, both sessions work in demo.`,
  );
  await runner.emit({ type: "session_start", reason: "fork" });
  expect(of(c, "fork")).toEqual([
    { action: "fork", name: "demo", names: [expect.stringMatching(/^demo-[0-9a-f]{6}$/)], from: second.id },
  ]);
  expect(shown!.notes.map((n) => n.message)).toContainEqual(
    expect.stringMatching(
      new RegExp(
        `^Forking demo into demo-[0-9a-f]{6} for this session as it was at checkpoint ${second.id} \\(before "second"\\)`,
      ),
    ),
  );
  // /clone: at the tip, the instance as it is now (this runtime went on with the fork attached).
  const attached = (of(c, "fork")[0]!.names as string[])[0]!;
  answers.push(FORK_CHOICES[0]);
  await runner.emit({ type: "session_before_fork", entryId: s.session.sessionManager.getLeafId()!, position: "at" });
  expect(shown!.selects.at(-1)!.title).toBe(
    `Fork the environment ${attached} for the new session? Without a fork, both sessions work in ${attached}.`,
  );
  await runner.emit({ type: "session_start", reason: "fork" });
  expect(of(c, "fork").at(-1)).toEqual({ action: "fork", name: attached, names: [expect.any(String)] });
});

test("a /fork another extension cancels after ours answered leaves no fork behind", async () => {
  const c = fakeController();
  let cancel = true;
  const canceller: ExtensionFactory = (pi) => {
    pi.on("session_before_fork", () => (cancel ? { cancel: true } : undefined));
  };
  const answers: (string | undefined)[] = [FORK_CHOICES[0]];
  const { s } = await start(c, [], answers, true, [canceller]);
  const runner = s.session.extensionRunner;
  const leaf = s.session.sessionManager.getLeafId()!;
  expect(await runner.emit({ type: "session_before_fork", entryId: leaf, position: "at" })).toEqual({ cancel: true });
  // No session started, so nothing was made; the next /fork (kept this time) hands nothing over.
  expect(of(c, "fork")).toEqual([]);
  cancel = false;
  answers.push(FORK_CHOICES[1]);
  expect(await runner.emit({ type: "session_before_fork", entryId: leaf, position: "at" })).toBeUndefined();
  await runner.emit({ type: "session_start", reason: "fork" });
  expect(of(c, "fork")).toEqual([]);
});

test("without a UI: checkpoints only for the attached instance, no question, no rewind", async () => {
  const c = fakeController();
  const { s } = await start(c, [
    bash("echo 1 > f"),
    done,
    callSandbox({ action: "exec", name: "other", cmd: "touch x" }),
    done,
  ]);
  await s.session.prompt("first");
  await s.session.prompt("elsewhere");
  expect(of(c, "checkpoint")).toEqual([
    { action: "checkpoint", name: "demo", label: `pi:${userEntry(s, "first").id}` },
  ]);
  await s.session.navigateTree(userEntry(s, "first").id);
  expect(of(c, "rewind")).toEqual([]);
  expect(of(c, "checkpoints")).toEqual([]);
});

test("a failing checkpoint is told once; the turns go on", async () => {
  const c = fakeController();
  c.state.failCheckpoint = true;
  const { s, shown } = await start(c, [bash("echo 1"), done, bash("echo 2"), done], []);
  await s.session.prompt("first");
  await s.session.prompt("second");
  const ends = s.events.filter((e) => e.type === "tool_execution_end");
  expect(ends.map((e) => e.isError)).toEqual([false, false]);
  expect(of(c, "checkpoint")).toHaveLength(2);
  const warnings = shown!.notes.filter((n) => n.level === "warning");
  expect(warnings).toEqual([
    {
      level: "warning",
      message:
        "Could not keep a checkpoint of demo before this turn (the turn goes on; /tree cannot rewind demo to this point):\nCONTROLLER_INTERNAL: the disk is full\nHint: Free some space.",
    },
  ]);
  await s.session.prompt("/sandbox checkpoints");
  expect(shown!.notes.at(-1)!.message).toBe(
    "demo has no checkpoints.\nThe last checkpoint before a turn failed: CONTROLLER_INTERNAL: the disk is full\nHint: Free some space.",
  );
});
