// The TUI lines a user sees for a call and its result (theme colors shown as <color> tags).

import type { Theme } from "@earendil-works/pi-coding-agent";
import { ControllerError } from "@pi-sandbox/controller/client";
import { createSandboxTool } from "../src/index.js";
import { detachedResult, errorResult, progressResult, successResult } from "../src/format.js";

const theme = {
  fg: (color: string, text: string) => `<${color}>${text}</>`,
  bold: (text: string) => text,
} as unknown as Theme;

const tool = createSandboxTool({ callAction: async () => ({}) });
const ctx = {} as never;

function lines(component: { render(width: number): readonly string[] }): string[] {
  return component.render(200).map((l) => l.trimEnd());
}

test("the call line names the action and the instance, even for half-streamed input", () => {
  expect(lines(tool.renderCall!({ input: '{"action":"create","name":"demo"}' }, theme, ctx))).toEqual([
    "<toolTitle>sandbox </><accent>create</> <text>demo</>",
  ]);
  expect(lines(tool.renderCall!({ input: "{}" }, theme, ctx))).toEqual(["<toolTitle>sandbox </><accent>help</>"]);
  expect(lines(tool.renderCall!({ input: '{"action":"cre' }, theme, ctx))).toEqual([
    "<toolTitle>sandbox </><accent>?</>",
  ]);
});

test("a running instance shows its state and preview links; expanded adds the JSON", () => {
  const result = successResult(
    { action: "create", name: "demo" },
    { state: "running", previews: [{ service: "web", url: "http://127.0.0.1:41000/", title: "Site" }] },
  );
  const compact = lines(tool.renderResult!(result, { expanded: false, isPartial: false }, theme, ctx));
  expect(compact).toEqual([
    "<success>✓ </>demo · running",
    "  <muted>web</> <accent>http://127.0.0.1:41000/</><dim>  Site</>",
  ]);
  const expanded = lines(tool.renderResult!(result, { expanded: true, isPartial: false }, theme, ctx));
  expect(expanded.slice(2).join("")).toContain('"state":"running"');
});

test("exec results summarize the exit code or the running handle", () => {
  const exited = successResult({ action: "exec", name: "demo" }, { running: false, exitCode: 3, output: "x" });
  expect(lines(tool.renderResult!(exited, { expanded: false, isPartial: false }, theme, ctx))).toEqual([
    "<success>✓ </>demo · exit 3",
  ]);
  const running = successResult({ action: "exec", name: "demo" }, { running: true, pid: "7", output: "" });
  expect(lines(tool.renderResult!(running, { expanded: false, isPartial: false }, theme, ctx))).toEqual([
    "<success>✓ </>demo · still running, pid 7",
  ]);
});

test("progress shows the latest stage; errors and interruptions show the hint", () => {
  const partial = progressResult({ action: "create", name: "demo" }, [
    { stage: "boot", message: "booting" },
    { stage: "setup", message: "$ printf hello" },
  ]);
  expect(lines(tool.renderResult!(partial, { expanded: false, isPartial: true }, theme, ctx))).toEqual([
    "<muted>… [setup] $ printf hello</>",
  ]);
  const failed = errorResult(
    { action: "start", name: "demo" },
    new ControllerError("CONTROLLER_NOT_FOUND", "no instance named demo", { hint: "List instances." }),
  );
  expect(lines(tool.renderResult!(failed, { expanded: false, isPartial: false }, theme, ctx))).toEqual([
    "<error>✗ CONTROLLER_NOT_FOUND: no instance named demo</>",
    "<dim>  List instances.</>",
  ]);
  const detached = detachedResult({ action: "stop", name: "demo" }, []);
  const shown = lines(tool.renderResult!(detached, { expanded: false, isPartial: false }, theme, ctx));
  expect(shown[0]).toBe("<warning>stopped waiting; the work continues</>");
  expect(shown[1]).toContain('{"action":"inspect","name":"demo"}');
});
