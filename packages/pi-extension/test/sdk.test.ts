// The extension inside an in-process Pi session with a fake controller client: what reaches the
// controller, what the model and the renderer get back, progress streaming and interruption.

import { ControllerError, type CallActionOptions } from "@pi-sandbox/controller/client";
import { callSandbox, done, startSdkSession, type SdkSession } from "./support/sdk-session.js";
import type { Json } from "./support/pi-harness.js";

interface Call {
  input: unknown;
  options: CallActionOptions;
}

const sessions: SdkSession[] = [];
afterEach(async () => {
  for (const s of sessions.splice(0)) await s.close();
});

async function start(callAction: (input: unknown, options: CallActionOptions) => Promise<unknown>, steps: unknown[]) {
  const s = await startSdkSession(callAction, [...(steps as Parameters<typeof startSdkSession>[1]), done]);
  sessions.push(s);
  return s;
}

const ends = (s: SdkSession) => s.events.filter((e) => e.type === "tool_execution_end");
const textOf = (e: Json) => (e.result.content as { text: string }[]).map((c) => c.text).join("");

test("every argument shape reaches the controller as one JSON string, with the session cwd and caller model", async () => {
  const calls: Call[] = [];
  const s = await start(
    async (input, options) => {
      calls.push({ input, options });
      return { instances: [] };
    },
    [
      callSandbox({ input: '{"action":"list"}' }),
      callSandbox('{"action":"list","kind":"templates"}'),
      callSandbox({ action: "inspect", name: "demo" }),
      callSandbox({ input: { action: "logs", name: "demo" } }),
      callSandbox({}),
    ],
  );
  await s.session.prompt("go");
  expect(calls.map((c) => c.input)).toEqual([
    '{"action":"list"}',
    '{"action":"list","kind":"templates"}',
    '{"action":"inspect","name":"demo"}',
    '{"action":"logs","name":"demo"}',
    "{}",
  ]);
  for (const { options } of calls) {
    expect(options.caller).toBe("model");
    expect(options.cwd).toBe(s.cwd);
    expect(options.signal).toBeInstanceOf(AbortSignal);
  }
  expect(ends(s).every((e) => e.isError === false)).toBe(true);
});

test("a result is compact JSON for the model and a summary in details", async () => {
  const created = {
    name: "demo",
    state: "running",
    previews: [{ service: "web", url: "http://127.0.0.1:41000/", title: "web" }],
  };
  const s = await start(
    async () => created,
    [callSandbox({ input: '{"action":"create","name":"demo","config":"a.yaml"}' })],
  );
  await s.session.prompt("create");
  const [end] = ends(s);
  expect(end!.isError).toBe(false);
  expect(textOf(end!)).toBe(JSON.stringify(created));
  expect(end!.result.details).toEqual({
    action: "create",
    name: "demo",
    status: "ok",
    state: "running",
    previews: created.previews,
  });
  expect(end!.result.structuredContent).toEqual(created);
});

test("a ControllerError becomes a tool error with its code and hint; anything else is flagged as a bug", async () => {
  let n = 0;
  const s = await start(async () => {
    n += 1;
    if (n === 1) {
      throw new ControllerError("CONTROLLER_DAEMON_EXITING", "the controller of demo is exiting", {
        hint: "Wait for it to finish, then try again.",
      });
    }
    throw new TypeError("boom");
  }, [callSandbox({ input: '{"action":"stop","name":"demo"}' }), callSandbox({ input: '{"action":"list"}' })]);
  await s.session.prompt("stop");
  const [busy, bug] = ends(s);
  expect(busy!.isError).toBe(true);
  expect(textOf(busy!)).toBe(
    "CONTROLLER_DAEMON_EXITING: the controller of demo is exiting\nHint: Wait for it to finish, then try again.",
  );
  expect(busy!.result.details).toMatchObject({
    action: "stop",
    name: "demo",
    status: "error",
    error: { code: "CONTROLLER_DAEMON_EXITING", hint: "Wait for it to finish, then try again." },
  });
  expect(bug!.isError).toBe(true);
  expect(textOf(bug!)).toMatch(/^PI_SANDBOX_UNEXPECTED: boom\nHint: /);
});

test("progress events stream as tool updates, then the final result arrives", async () => {
  const stages = [
    { stage: "disk", message: "creating the disk" },
    { stage: "boot", message: "booting the VM" },
    { stage: "services", message: "web is ready" },
  ];
  const s = await start(
    async (_input, options) => {
      for (const event of stages) {
        options.onProgress?.(event);
        await new Promise((r) => setTimeout(r, 5));
      }
      return { state: "running", previews: [] };
    },
    [callSandbox({ input: '{"action":"start","name":"demo"}' })],
  );
  await s.session.prompt("start");
  const updates = s.events.filter((e) => e.type === "tool_execution_update");
  expect(updates.map((u) => textOf({ result: u.partialResult }))).toEqual([
    "[disk] creating the disk",
    "[boot] booting the VM",
    "[services] web is ready",
  ]);
  expect(updates.at(-1)!.partialResult.details).toMatchObject({ status: "running", progress: stages });
  const [end] = ends(s);
  expect(end).toMatchObject({ isError: false, result: { details: { status: "ok", state: "running" } } });
});

describe("interrupting a call ends only the wait", () => {
  async function interrupt(respectSignal: boolean) {
    let sawAbort = false;
    let finish!: (value: unknown) => void;
    const work = new Promise((resolve) => (finish = resolve));
    const s = await start(
      (_input, options) => {
        options.onProgress?.({ stage: "boot", message: "booting the VM" });
        options.signal?.addEventListener("abort", () => (sawAbort = true));
        if (!respectSignal) return work;
        return new Promise((_resolve, reject) =>
          options.signal?.addEventListener("abort", () => reject(options.signal?.reason)),
        );
      },
      [callSandbox({ input: '{"action":"create","name":"demo","config":"sandbox.yaml"}' })],
    );
    s.session.subscribe((event) => {
      if (event.type === "tool_execution_update") void s.session.abort();
    });
    await s.session.prompt("create");
    finish({ state: "running" });
    const [end] = ends(s);
    expect(sawAbort).toBe(true);
    return end!;
  }

  test.each([
    ["a client that honours the signal", true],
    ["a client that ignores it", false],
  ])("with %s, the result says the work continues and how to follow it", async (_label, respect) => {
    const end = await interrupt(respect);
    expect(end.isError).toBe(true);
    const text = textOf(end);
    expect(text).toContain("Stopped waiting for create of demo because the user interrupted.");
    expect(text).toContain("Whatever the controller already received continues.");
    expect(text).toContain('{"action":"inspect","name":"demo"}');
    expect(text).toContain('{"action":"logs","name":"demo"}');
    expect(text).toContain("Last progress: [boot] booting the VM");
    expect(end.result.details).toMatchObject({ status: "detached", error: { code: "PI_SANDBOX_WAIT_ENDED" } });
  });
});
