// What the model receives for big results: within Pi's tool-output budget, still JSON, with the
// useful end of the guest text kept and a note on how to see the rest.

import { DEFAULT_MAX_BYTES } from "@earendil-works/pi-coding-agent";
import { SandboxExtensionError } from "../src/errors.js";
import { errorResult, successResult } from "../src/format.js";

const numbered = (n: number, width = 60) =>
  Array.from({ length: n }, (_, i) => `line ${String(i + 1).padStart(5, "0")} ${"x".repeat(width)}`).join("\n") + "\n";

function modelText(action: string, result: Record<string, unknown>): string {
  const content = successResult({ action, name: "demo" }, result).content[0];
  if (content?.type !== "text") throw new Error("expected text content");
  return content.text;
}

test("a small result goes to the model whole", () => {
  const result = { running: false, exitCode: 0, output: "42\n" };
  expect(JSON.parse(modelText("exec", result))).toEqual(result);
});

test("64 KiB of exec output keeps its end within the budget and says how to see the rest", () => {
  const output = numbered(1000); // ~69 KB, with quotes and control characters for JSON to escape
  const text = modelText("exec", { running: false, exitCode: 1, output: `"\t${output}` });
  expect(Buffer.byteLength(text)).toBeLessThanOrEqual(DEFAULT_MAX_BYTES);
  const parsed = JSON.parse(text);
  expect(parsed.exitCode).toBe(1);
  expect(parsed.output.endsWith("line 01000 " + "x".repeat(60) + "\n")).toBe(true);
  expect(parsed.output).not.toContain("line 00001 ");
  expect(parsed.truncated).toMatch(/^output cut to its last .* of .*; to see the rest, redirect/);
  // Code-mode scripts still get everything.
  const full = successResult({ action: "exec", name: "demo" }, { output }).structuredContent as { output: string };
  expect(full.output).toBe(output);
});

test("a big file read keeps its start; big logs keep the newest lines", () => {
  const read = JSON.parse(modelText("read", { path: "/workspace/big.txt", content: numbered(1200) }));
  expect(read.content.startsWith("line 00001 ")).toBe(true);
  expect(read.content).not.toContain("line 01200 ");
  expect(read.truncated).toMatch(/^content cut to its first/);

  const logLines = numbered(900, 80).trimEnd().split("\n");
  const text = modelText("logs", { name: "demo", service: "web", lines: logLines });
  expect(Buffer.byteLength(text)).toBeLessThanOrEqual(DEFAULT_MAX_BYTES);
  const logs = JSON.parse(text);
  expect(logs.lines.at(-1)).toBe(logLines.at(-1));
  expect(logs.lines.length).toBeLessThan(logLines.length);
  expect(logs.truncated).toMatch(/^lines cut to its last .*ask for fewer lines/);
});

test("a file that is one huge line still shows its start", () => {
  const text = modelText("read", { path: "/workspace/app.min.js", content: "a".repeat(80_000) });
  expect(Buffer.byteLength(text)).toBeLessThanOrEqual(DEFAULT_MAX_BYTES);
  const read = JSON.parse(text);
  expect(read.content.length).toBeGreaterThan(40_000);
  expect(read.truncated).toMatch(/^content cut to its first/);
});

test("any pi-sandbox error reaches the model as CODE: message, then its hint on its own line", () => {
  const own = errorResult(
    { action: "attach", name: "demo" },
    new SandboxExtensionError("PI_SANDBOX_ATTACH_FAILED", "could not read the guest's home", { hint: "start it" }),
  );
  expect(own.content).toEqual([
    { type: "text", text: "PI_SANDBOX_ATTACH_FAILED: could not read the guest's home\nHint: start it" },
  ]);
  expect(own.details?.error).toEqual({
    code: "PI_SANDBOX_ATTACH_FAILED",
    message: "could not read the guest's home",
    hint: "start it",
  });
  const unexpected = errorResult({ action: "exec", name: "demo" }, new Error("boom"));
  expect(unexpected.details?.error).toMatchObject({ code: "PI_SANDBOX_UNEXPECTED", message: "boom" });
});
