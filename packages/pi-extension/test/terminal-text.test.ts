// Guest text never reaches Pi's terminal raw: the model's copy (which Pi's TUI and print mode
// show), the renderer's lines and the /sandbox notifications carry no control character.

import type { Theme } from "@earendil-works/pi-coding-agent";
import { ControllerError } from "@pi-sandbox/controller/client";
import { createSandboxCommand, createSandboxTool } from "../src/index.js";
import { detachedResult, errorResult, progressResult, successResult, type SandboxToolResult } from "../src/format.js";

/** What a prompt-injected guest writes: OSC 52 (sets the clipboard), BEL, a screen clear, C1 CSI. */
const HOSTILE = "x\u001b]52;c;aGk=\u0007\u001b[2Jz\u009b2J";
/** Every control character a terminal acts on: C0 but line feed, DEL, C1. */
const RAW_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/;

const theme = {
  fg: (color: string, text: string) => `<${color}>${text}</>`,
  bold: (text: string) => text,
} as unknown as Theme;
const tool = createSandboxTool({ callAction: async () => ({}) });
const ctx = {} as never;

function rendered(result: SandboxToolResult, expanded = true, isPartial = false): string {
  return tool.renderResult!(result, { expanded, isPartial }, theme, ctx).render(200).join("\n");
}

function modelText(result: SandboxToolResult): string {
  return result.content.map((c) => (c.type === "text" ? c.text : "")).join("\n");
}

test("a result full of guest text: the model's JSON keeps the value, no line carries a control", () => {
  const raw = {
    name: "demo",
    state: "running",
    previews: [{ service: "web", url: `http://127.0.0.1:4000/${HOSTILE}`, title: HOSTILE, folder: HOSTILE }],
    output: `coloured \u001b[31mred\u001b[0m\r\n${HOSTILE}\n`,
  };
  const result = successResult({ action: "create", name: "demo" }, raw);
  const text = modelText(result);
  expect(text).not.toMatch(RAW_CONTROL);
  expect(JSON.parse(text)).toEqual(raw); // JSON escapes: the model reads the exact value
  expect(result.structuredContent).toEqual(raw); // scripts get the data untouched
  for (const expanded of [false, true]) {
    const lines = rendered(result, expanded);
    expect(lines).not.toMatch(RAW_CONTROL);
    expect(lines).toContain("<dim>  x\\x1b]52;c;aGk=\\x07\\x1b[2Jz\\u009b2J</>");
  }
});

test("an error whose message and hint come from the guest is escaped for the model and the TUI", () => {
  const error = new ControllerError("SERVICE_NOT_READY", `web died: ${HOSTILE}\nsecond line`, {
    hint: `see ${HOSTILE}`,
  });
  const result = errorResult({ action: "services", name: "demo" }, error);
  const text = modelText(result);
  expect(text).not.toMatch(RAW_CONTROL);
  expect(text).toBe(
    "SERVICE_NOT_READY: web died: x\\x1b]52;c;aGk=\\x07\\x1b[2Jz\\u009b2J\nsecond line\nHint: see x\\x1b]52;c;aGk=\\x07\\x1b[2Jz\\u009b2J",
  );
  expect(rendered(result)).not.toMatch(RAW_CONTROL);
  const unexpected = errorResult({ action: "exec", name: "demo" }, new Error(HOSTILE));
  expect(modelText(unexpected)).not.toMatch(RAW_CONTROL);
  expect(rendered(unexpected)).not.toMatch(RAW_CONTROL);
});

test("progress, an interrupted wait and the call line are escaped, whoever wrote them", () => {
  const events = [{ stage: `setup${HOSTILE}`, message: `$ printf ${HOSTILE}\nforged line` }];
  const partial = progressResult({ action: "create", name: "demo" }, events);
  expect(modelText(partial)).not.toMatch(/[\n\u0000-\u001f\u007f-\u009f]/);
  expect(rendered(partial, false, true)).not.toMatch(RAW_CONTROL);
  expect(rendered(partial, true, true)).not.toMatch(RAW_CONTROL);

  const detached = detachedResult({ action: "exec", name: `demo${HOSTILE}` }, events);
  expect(modelText(detached)).not.toMatch(RAW_CONTROL);
  expect(rendered(detached)).not.toMatch(RAW_CONTROL);

  const call = tool.renderCall!({ input: JSON.stringify({ action: `exec${HOSTILE}`, name: HOSTILE }) }, theme, ctx);
  expect(call.render(200).join("\n")).not.toMatch(RAW_CONTROL);
});

test("a result Pi made itself (no details) is escaped by the renderer", () => {
  const result = {
    content: [{ type: "text" as const, text: `aborted ${HOSTILE}` }],
    details: undefined,
    isError: true,
  };
  const lines = rendered(result as unknown as SandboxToolResult);
  expect(lines).not.toMatch(RAW_CONTROL);
  expect(lines).toContain("aborted x\\x1b]52");
});

test("/sandbox tells the user a guest-made error escaped", async () => {
  const command = createSandboxCommand({
    callAction: async () => {
      throw new ControllerError("CONTROLLER_NOT_RUNNING", `demo is stopped ${HOSTILE}`, { hint: HOSTILE });
    },
  });
  const told: string[] = [];
  const commandCtx = {
    hasUI: true,
    cwd: "/",
    ui: { notify: (message: string) => told.push(message) },
  } as unknown as Parameters<typeof command.handler>[1];
  await command.handler("demo", commandCtx);
  expect(told).toHaveLength(1);
  expect(told[0]).toContain("demo is stopped x\\x1b]52;c;aGk=\\x07");
  expect(told[0]).not.toMatch(RAW_CONTROL);
});
