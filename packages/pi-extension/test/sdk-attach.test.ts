// Attach and detach inside an in-process Pi session with a fake controller client: what the
// attach asks of the guest, the active tool set left as it was, a call that finds the instance
// stopped (typed error, detach, back on the host), and an attach that survives /reload.

import { fauxAssistantMessage, fauxToolCall } from "@earendil-works/pi-ai";
import { initTheme } from "@earendil-works/pi-coding-agent";
import { visibleWidth } from "@earendil-works/pi-tui";
import { ControllerError, type CallActionOptions } from "@pi-sandbox/controller/client";
import { done, startSdkSession, type SdkSession } from "./support/sdk-session.js";
import type { Json } from "./support/pi-harness.js";

const sessions: SdkSession[] = [];
/** What the extension told the user: without a UI (the SDK session has none) it goes to stderr. */
let told: string[] = [];
const realWrite = process.stderr.write.bind(process.stderr);
beforeEach(() => {
  told = [];
  process.stderr.write = ((chunk: string | Uint8Array) => {
    told.push(String(chunk));
    return true;
  }) as typeof process.stderr.write;
});
afterEach(async () => {
  process.stderr.write = realWrite;
  for (const s of sessions.splice(0)) await s.close();
});

const bash = (command: string) => fauxAssistantMessage(fauxToolCall("bash", { command }), { stopReason: "toolUse" });
const ends = (s: SdkSession) => s.events.filter((e) => e.type === "tool_execution_end");
const textOf = (e: Json) => (e.result.content as { text: string }[]).map((c) => c.text).join("");

/** A guest that answers the attach probe and then runs `uname -n` until `stopped` is set. */
function fakeGuest() {
  const state = { stopped: false, calls: [] as Record<string, unknown>[] };
  const callAction = async (input: unknown, _options: CallActionOptions) => {
    const action = input as Record<string, unknown>;
    state.calls.push(action);
    if (action.action === "list") return { instances: [] };
    if (state.stopped) {
      throw new ControllerError("CONTROLLER_NOT_RUNNING", "instance demo is not running (stopped)", {
        hint: 'Start it with {"action":"start","name":"demo"}.',
      });
    }
    if (action.action === "exec" && String(action.cmd).startsWith("pwd\n")) {
      return { pid: "1", running: false, exitCode: 0, output: "/workspace\nfd=fdfind\n", truncatedBytes: 0 };
    }
    if (action.action === "exec") {
      return { pid: "2", running: false, exitCode: 0, output: `guest ran: ${String(action.cmd)}\n`, truncatedBytes: 0 };
    }
    throw new Error(`unexpected action ${JSON.stringify(action)}`);
  };
  return { state, callAction };
}

test("an attached bash runs in the guest; a stopped instance fails the call with its code, detaches, and the next call runs on the host", async () => {
  const guest = fakeGuest();
  const s = await startSdkSession(guest.callAction, [
    bash("echo one"),
    done,
    bash("echo two"),
    done,
    bash("echo three"),
    done,
  ]);
  sessions.push(s);
  const activeBefore = s.session.getActiveToolNames();
  await s.session.prompt("/sandbox attach demo");
  expect(told).toContainEqual(
    expect.stringMatching(
      /^Attached to demo: read, bash, edit, write, grep, find, ls run in the instance \(cwd \/workspace\)/,
    ),
  );
  expect(guest.state.calls[0]).toMatchObject({ action: "exec", name: "demo" });
  // Attaching registered the overrides without switching on tools the user had off.
  expect(s.session.getActiveToolNames().sort()).toEqual([...activeBefore].sort());

  await s.session.prompt("first");
  const [first] = ends(s);
  expect(first).toMatchObject({ toolName: "bash", isError: false });
  expect(textOf(first!)).toBe("guest ran: echo one\n");
  expect(first!.result.details.sandbox).toBe("demo");
  // Pi's own bash renderer draws the result, plus a line naming the instance.
  initTheme("dark", false);
  const plainTheme = new Proxy({}, { get: () => (a: unknown, b?: unknown) => String(b ?? a) }) as never;
  const context = { args: { command: "echo one" }, toolCallId: "t", invalidate: () => undefined, state: {} } as never;
  const rendered = s.session.getToolDefinition("bash")!.renderResult!(
    first!.result,
    { expanded: false, isPartial: false },
    plainTheme,
    context,
  ).render(80);
  expect(rendered.at(-1)?.trimEnd()).toBe("in sandbox demo");
  expect(rendered.every((line) => visibleWidth(line) <= 80)).toBe(true);
  expect(rendered.join("\n")).toContain("guest ran: echo one");
  // The host's environment did not travel with the command.
  expect(guest.state.calls.at(-1)).not.toHaveProperty("env");

  guest.state.stopped = true;
  await s.session.prompt("second");
  const second = ends(s)[1]!;
  expect(second.isError).toBe(true);
  expect(textOf(second)).toMatch(
    /^CONTROLLER_NOT_RUNNING: instance demo is not running \(stopped\)\nHint: Start it with .*\nPi detached from demo: read, bash, edit, write, grep, find, ls act on the host again/s,
  );

  expect(told.at(-1)).toMatch(/^demo is no longer running \(CONTROLLER_NOT_RUNNING: .*\)\. Detached from demo: /);

  await s.session.prompt("third");
  const third = ends(s)[2]!;
  expect(third.isError).toBe(false);
  expect(textOf(third).trim()).toBe("three");
  expect(third.result.details?.sandbox).toBeUndefined();
});

test("an attach survives /reload, and the model is told where its tools run", async () => {
  const guest = fakeGuest();
  const s = await startSdkSession(guest.callAction, [bash("echo after-reload"), done]);
  sessions.push(s);
  await s.session.bindExtensions({});
  await s.session.prompt("/sandbox attach demo");
  await s.session.reload();
  const probes = guest.state.calls.filter((c) => c.action === "exec" && String(c.cmd).startsWith("pwd\n"));
  expect(probes).toHaveLength(2);
  await s.session.prompt("go");
  const [end] = ends(s);
  expect(textOf(end!)).toBe("guest ran: echo after-reload\n");
  const custom = s.session.messages.filter((m) => (m as { role: string }).role === "custom");
  expect(JSON.stringify(custom)).toContain("attached Pi to the sandbox instance demo");
});
