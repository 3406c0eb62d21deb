// A real Pi process (RPC mode, the fake model) attached to one real instance, moving the
// environment with the conversation: two turns that each write a guest file leave one checkpoint
// each, labelled with the turn's message; going back in the tree to the end of the first turn,
// with the select answered "rewind", brings the file back to what that turn wrote, and going
// forward to the old tip brings the second turn's file back; /fork to the second turn, answered
// "fork", makes a fork of the checkpoint before that turn, which the new session is attached to. RPC has no tree command: a test-only extension's /goto calls
// Pi's own navigateTree, so session_before_tree reaches the extension exactly as /tree does.

import { rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { callAction } from "@pi-sandbox/controller/client";
import { SEED_YAML, testImage } from "@pi-sandbox/controller/testing";
import { FORK_CHOICES, REWIND_CHOICES } from "../src/branching.js";
import { startFakeOpenAI, type FakeOpenAI } from "./support/fake-openai.js";
import { makePiHome, PACKAGE_DIR, PiRpc, resultText, type Json, type PiHome } from "./support/pi-harness.js";

const SLOW = 600_000;
let fake: FakeOpenAI;
let home: PiHome;
let rpc: PiRpc;
let forkName: string | undefined;

const call = (action: Record<string, unknown>) =>
  callAction(action, { env: home.env, cwd: home.workDir }) as Promise<Json>;

const ui =
  (method: string, match: (e: Json) => boolean = () => true) =>
  (e: Json) =>
    e.type === "extension_ui_request" && e.method === method && match(e);

/** The first event after `from` events that matches. */
const after = (from: number, match: (e: Json) => boolean, timeoutMs = SLOW) =>
  rpc.waitFor((e) => rpc.events.indexOf(e) >= from && match(e), timeoutMs);

/** Sends a prompt whose tool calls the fake model scripts, and returns their ends once Pi settles. */
async function run(prompt: string, ...calls: { tool: string; args: Record<string, unknown> }[]): Promise<Json[]> {
  const from = rpc.events.length;
  fake.script(...calls);
  rpc.send({ type: "prompt", message: prompt });
  await after(from, (e) => e.type === "agent_settled");
  return rpc.events.slice(from).filter((e) => e.type === "tool_execution_end");
}

/** The session's entries, through RPC. */
async function entries(): Promise<Json[]> {
  const id = `entries-${rpc.events.length}`;
  rpc.send({ id, type: "get_entries" });
  const response = await rpc.waitFor((e) => e.id === id && e.type === "response");
  return response.data.entries as Json[];
}

const userMessage = (all: Json[], text: string) =>
  all.find(
    (e) => e.type === "message" && e.message.role === "user" && JSON.stringify(e.message.content).includes(text),
  )!;

const guestFile = async (name = "dev") =>
  ((await call({ action: "read", name, path: "/workspace/notes.txt" })).content as string) ?? "";

/** Navigates the tree to `entryId`, answers the rewind question with `answer`, and waits for the end. */
async function goTo(entryId: string, answer: string): Promise<{ title: string; told: string[] }> {
  const from = rpc.events.length;
  rpc.send({ type: "prompt", message: `/goto ${entryId}` });
  const question = await after(from, ui("select"));
  expect(question.options).toEqual([...REWIND_CHOICES]);
  rpc.send({ type: "extension_ui_response", id: question.id, value: answer });
  await after(
    from,
    ui("notify", (n) => String(n.message).startsWith("goto: ")),
  );
  const told = rpc.events
    .slice(from)
    .filter(ui("notify"))
    .map((n) => String(n.message));
  expect(told.at(-1)).toMatch(/^goto: moved /);
  return { title: question.title as string, told };
}

beforeAll(async () => {
  fake = await startFakeOpenAI();
  home = await makePiHome(fake, "pbr-");
  await writeFile(join(home.workDir, "sandbox.yaml"), `version: 1\nimage: ${testImage()}\n${SEED_YAML}`);
  expect((await call({ action: "create", name: "dev", config: "sandbox.yaml" })).state).toBe("running");
  rpc = PiRpc.start(home, [
    "-e",
    PACKAGE_DIR,
    "-e",
    join(PACKAGE_DIR, "test/support/goto-extension.ts"),
    "--tools",
    "read,bash,edit,write",
  ]);
  const from = rpc.events.length;
  rpc.send({ type: "prompt", message: "/sandbox attach dev" });
  expect((await after(from, ui("notify"))).message).toMatch(/^Attached to dev: /);
});

afterAll(async () => {
  if (rpc) await rpc.close();
  for (const name of ["dev", forkName])
    if (name) await call({ action: "destroy", name, confirm: name }).catch(() => undefined);
  await fake?.close();
  if (home) await rm(home.dir, { recursive: true, force: true });
});

test("a checkpoint per turn; /tree back to the first turn's end rewinds the guest, and forward again", async () => {
  const first = await run("first turn", { tool: "write", args: { path: "notes.txt", content: "one\n" } });
  const second = await run(
    "second turn",
    { tool: "bash", args: { command: "cat notes.txt" } },
    { tool: "write", args: { path: "notes.txt", content: "two\n" } },
  );
  for (const end of [...first, ...second])
    expect({ tool: end.toolName, isError: end.isError }).toMatchObject({ isError: false });
  expect(resultText(second[0]!)).toBe("one\n");
  expect(await guestFile()).toBe("two\n");

  const all = await entries();
  const [u1, u2] = [userMessage(all, "first turn"), userMessage(all, "second turn")];
  const kept = (await call({ action: "checkpoints", name: "dev" })).checkpoints as Json[];
  expect(kept.map((c) => c.label)).toEqual([`pi:${u1.id}`, `pi:${u2.id}`]);
  expect(kept.map((c) => c.kind)).toEqual(["disk", "disk"]);

  // /sandbox checkpoints says which turn each belongs to.
  let from = rpc.events.length;
  rpc.send({ type: "prompt", message: "/sandbox checkpoints" });
  const listing = String((await after(from, ui("notify"))).message);
  expect(listing).toMatch(/^Checkpoints of dev, oldest first/);
  expect(listing).toContain(`${kept[0]!.id}`);
  expect(listing).toMatch(/disk {2}before "first turn"\n.*disk {2}before "second turn"$/s);

  // Back to the end of the first turn (the entry the second turn's message follows).
  const tip = (await entries()).at(-1)!.id as string;
  const back = await goTo(u2.parentId as string, REWIND_CHOICES[0]);
  expect(back.title).toBe(
    `Rewind the environment dev to this point too? (checkpoint ${kept[1]!.id}, before "second turn")`,
  );
  expect(back.told).toContain(`Rewound dev to checkpoint ${kept[1]!.id} (before "second turn").`);
  expect(await guestFile()).toBe("one\n");
  // Still attached: the next turn's bash runs in the rewound guest.
  const [look] = await run("look again", { tool: "bash", args: { command: "cat notes.txt" } });
  expect(resultText(look!)).toBe("one\n");
  expect(look!.result.details.sandbox).toBe("dev");

  // The tip that was left was kept (the controller's own copy of it was removed); going there rewinds to it.
  const now = (await call({ action: "checkpoints", name: "dev" })).checkpoints as Json[];
  expect(now.map((c) => c.label)).toEqual([`pi:${u1.id}`, `pi:${u2.id}`, `pi:${tip}`]);
  const forward = await goTo(tip, REWIND_CHOICES[0]);
  expect(forward.title).toBe(
    `Rewind the environment dev to this point too? (checkpoint ${now[2]!.id}, after "second turn")`,
  );
  expect(await guestFile()).toBe("two\n");

  from = rpc.events.length;
  rpc.send({ type: "prompt", message: "/sandbox checkpoints" });
  expect(String((await after(from, ui("notify"))).message)).toMatch(/after "look again"$/);
});

test("/fork to the second turn answered 'fork' forks the checkpoint of that point; the new session works in the fork", async () => {
  const u2 = userMessage(await entries(), "second turn");
  const kept = ((await call({ action: "checkpoints", name: "dev" })).checkpoints as Json[]).find(
    (c) => c.label === `pi:${u2.id}`,
  )!;
  const from = rpc.events.length;
  rpc.send({ id: "fork", type: "fork", entryId: u2.id });
  const question = await after(from, ui("select"));
  expect(question.title).toBe(
    `Fork the environment dev for the new session as it was at this point (checkpoint ${kept.id}, before "second turn")? Without a fork, both sessions work in dev.`,
  );
  expect(question.options).toEqual([...FORK_CHOICES]);
  rpc.send({ type: "extension_ui_response", id: question.id, value: FORK_CHOICES[0] });
  const forked = await rpc.waitFor((e) => e.id === "fork" && e.type === "response", SLOW);
  expect(forked).toMatchObject({ success: true, data: { cancelled: false } });
  const attached = await after(
    from,
    ui("notify", (n) => /^Attached to dev-[0-9a-f]{6} /.test(n.message)),
  );
  forkName = /^Attached to (dev-[0-9a-f]{6})/.exec(attached.message)![1];
  expect(attached.message).toContain(`(a fork of dev at checkpoint ${kept.id} made for this session)`);
  expect((await call({ action: "inspect", name: forkName })).state).toBe("running");
  // The fork holds the guest as it was before the second turn; dev stays at its tip.
  expect(await guestFile(forkName)).toBe("one\n");

  const [write] = await run("in the fork", { tool: "write", args: { path: "notes.txt", content: "fork\n" } });
  expect(write!.result.details.sandbox).toBe(forkName);
  expect(await guestFile(forkName)).toBe("fork\n");
  expect(await guestFile("dev")).toBe("two\n");
});
