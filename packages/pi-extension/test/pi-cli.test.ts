// A real Pi process loads this package (its `pi` manifest, built dist) and talks to the fake model
// server. No VM here: help, input errors, the model being refused the terminal, code mode, the
// /sandbox command's errors, and that loading starts nothing.

import { existsSync } from "node:fs";
import { rm } from "node:fs/promises";
import { renderHelp } from "@pi-sandbox/controller/client";
import { startFakeOpenAI, type FakeOpenAI } from "./support/fake-openai.js";
import {
  FAKE_MODEL_ARGS,
  makePiHome,
  PACKAGE_DIR,
  PiRpc,
  resultText,
  runPi,
  toolEnds,
  type PiHome,
} from "./support/pi-harness.js";

let fake: FakeOpenAI;
let home: PiHome;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  home = await makePiHome(fake);
});

afterAll(async () => {
  await fake.close();
  await rm(home.dir, { recursive: true, force: true });
});

function runJson(prompt: string, extra: string[] = []) {
  return runPi(home, [...FAKE_MODEL_ARGS, "-e", PACKAGE_DIR, ...extra, "--mode", "json", prompt]);
}

test("the model sees the sandbox tool and {} returns the controller's help", async () => {
  fake.script({ tool: "sandbox", args: { input: "{}" } });
  const before = fake.requests.length;
  const run = await runJson("what can sandbox do?");
  expect(run.code).toBe(0);
  const declared = fake.requests[before]!.tools?.find((t) => t.function.name === "sandbox");
  expect(declared?.function.parameters).toMatchObject({
    type: "object",
    properties: { input: { type: "string" } },
    required: ["input"],
  });
  expect(declared?.function.description).toContain("Send {} (or help) first");
  const [end] = toolEnds(run.events);
  expect(end).toMatchObject({ toolName: "sandbox", isError: false });
  expect(resultText(end!)).toBe(renderHelp());
  // The model got the same text back.
  expect(run.events.some((e) => e.type === "agent_settled")).toBe(true);
});

test("invalid JSON is a tool error carrying the controller's hint", async () => {
  fake.script({ tool: "sandbox", args: { input: '{"action": "list"' } });
  const run = await runJson("list");
  expect(run.code).toBe(0);
  const [end] = toolEnds(run.events);
  expect(end!.isError).toBe(true);
  expect(resultText(end!)).toMatch(/^CONTROLLER_BAD_INPUT: input is not valid JSON/);
  expect(resultText(end!)).toContain('Hint: Send one JSON object such as {"action":"list"}; {} returns help.');
});

test("the model is refused the terminal and pointed to /sandbox", async () => {
  fake.script({ tool: "sandbox", args: { input: '{"action":"shell","name":"demo"}' } });
  const run = await runJson("give me a shell");
  const [end] = toolEnds(run.events);
  expect(end!.isError).toBe(true);
  expect(resultText(end!)).toMatch(/^CONTROLLER_USER_ONLY: /);
  expect(resultText(end!)).toContain("/sandbox demo");
});

test("code mode calls tools.sandbox with a bare JSON string and gets the result object", async () => {
  const code = [
    `const listed = await tools.sandbox('{"action":"list"}');`,
    `let failure = "";`,
    `try { await tools.sandbox('{"action":"nope"}'); } catch (e) { failure = String(e.message); }`,
    `return { count: listed.instances.length, failure };`,
  ].join("\n");
  fake.script({ tool: "codemode", args: { code } });
  const run = await runJson("list sandboxes in a script", ["--tools", "+codemode"]);
  expect(run.code).toBe(0);
  const end = toolEnds(run.events).find((e) => e.toolName === "codemode");
  expect(end?.isError).toBe(false);
  const out = resultText(end!);
  expect(out).toContain("Script completed");
  expect(out).toContain('"count":0');
  expect(out).toContain("CONTROLLER_UNKNOWN_ACTION");
});

test("/sandbox tells the user about no running instances, bad usage and missing ones, never the model", async () => {
  const rpc = PiRpc.start(home, ["-e", PACKAGE_DIR]);
  try {
    const requestsBefore = fake.requests.length;
    // Without a name the command offers running instances; there are none.
    rpc.send({ id: "p1", type: "prompt", message: "/sandbox" });
    const none = await rpc.waitFor((e) => e.type === "extension_ui_request" && e.method === "notify");
    expect(none).toMatchObject({ notifyType: "info" });
    expect(none.message).toMatch(/^No instance is running\. Start one with the sandbox tool/);

    rpc.send({ id: "p0", type: "prompt", message: "/sandbox a b c" });
    const usage = await rpc.waitFor(
      (e) => e.type === "extension_ui_request" && e.method === "notify" && e.message !== none.message,
    );
    expect(usage).toMatchObject({ notifyType: "error" });
    expect(usage.message).toContain("Usage: /sandbox <name> [user]");

    rpc.send({ id: "p2", type: "prompt", message: "/sandbox ghost" });
    const missing = await rpc.waitFor(
      (e) =>
        e.type === "extension_ui_request" &&
        e.method === "notify" &&
        e.message !== usage.message &&
        e.message !== none.message,
    );
    expect(missing.notifyType).toBe("error");
    expect(missing.message).toMatch(/^CONTROLLER_NOT_(FOUND|RUNNING): /);
    const handled = await rpc.waitFor((e) => e.id === "p2" && e.type === "response");
    expect(handled.success).toBe(true);
    // Commands never reached the model.
    expect(fake.requests.length).toBe(requestsBefore);
  } finally {
    expect(await rpc.close()).toBe(0);
  }
});

test("loading the package and quitting Pi touches no sandbox state", async () => {
  const fresh = await makePiHome(fake);
  try {
    const rpc = PiRpc.start(fresh, ["-e", PACKAGE_DIR]);
    try {
      rpc.send({ id: "c", type: "get_commands" });
      const commands = await rpc.waitFor((e) => e.id === "c" && e.type === "response");
      expect(commands.data.commands.map((c: { name: string }) => c.name)).toContain("sandbox");
      rpc.send({ id: "t", type: "get_state" });
      await rpc.waitFor((e) => e.id === "t" && e.type === "response");
    } finally {
      expect(await rpc.close()).toBe(0);
    }
    // No state root means no daemon was spawned and nothing was created.
    expect(existsSync(fresh.stateRoot)).toBe(false);
  } finally {
    await rm(fresh.dir, { recursive: true, force: true });
  }
});
