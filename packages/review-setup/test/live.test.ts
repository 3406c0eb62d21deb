// What a user reads after a refresh: the Pi launch command for the guest, whether the live check
// got a real response from the model, and the summary saying offline snapshot unless live.
import { launchCommand } from "../src/launch.js";
import { reviewLayout } from "../src/layout.js";
import { parseLiveOutput } from "../src/live.js";
import { formatResult } from "../src/main.js";
import { DEFAULT_PI_COMMAND } from "../src/args.js";

const end = (message: Record<string, unknown>) => JSON.stringify({ type: "message_end", message });

test("the real Pi launch command: this checkout's Pi, the sandbox extension, the isolated agent dir", () => {
  const layout = reviewLayout("/workspace");
  expect(launchCommand(layout, { piCommand: DEFAULT_PI_COMMAND })).toBe(
    "cd /workspace/.review/current && PI_CODING_AGENT_DIR=/workspace/.review/agent node_modules/.bin/pi -e ./packages/pi-extension",
  );
  expect(launchCommand(reviewLayout("/my ws"), { piCommand: DEFAULT_PI_COMMAND, model: "openai-codex/gpt-5.4" })).toBe(
    "cd '/my ws/.review/current' && PI_CODING_AGENT_DIR='/my ws/.review/agent' node_modules/.bin/pi -e ./packages/pi-extension --model openai-codex/gpt-5.4",
  );
  expect(launchCommand(layout, { piCommand: "pi", extraArgs: ["it's"] })).toMatch(/ pi 'it'\\''s'$/);
});

test("the live output parser takes the assistant's final text and usage", () => {
  const output = [
    '{"type":"message_update","usage":{"input":1}}',
    end({ role: "user", content: "hi" }),
    end({
      role: "assistant",
      stopReason: "stop",
      content: [{ type: "text", text: " ready \n" }],
      usage: { input: 9, output: 2, totalTokens: 11 },
    }),
    "some stderr line",
  ].join("\n");
  expect(parseLiveOutput(output)).toEqual({ response: "ready", usage: { input: 9, output: 2, totalTokens: 11 } });
});

test.each([
  ["no events", "Error: no API key"],
  [
    "an error stop",
    end({
      role: "assistant",
      stopReason: "error",
      content: [{ type: "text", text: "x" }],
      usage: { input: 1, output: 1 },
    }),
  ],
  ["empty text", end({ role: "assistant", stopReason: "stop", content: [], usage: { input: 1, output: 0 } })],
  ["no usage", end({ role: "assistant", stopReason: "stop", content: [{ type: "text", text: "ok" }] })],
  [
    "a cut line",
    end({ role: "assistant", content: [{ type: "text", text: "ok" }], usage: { input: 1, output: 1 } }).slice(0, 40),
  ],
])("%s is not a generated response", (_label, output) => {
  expect(parseLiveOutput(output)).toBeUndefined();
});

test("the summary says offline snapshot unless live, and prints the launch command", () => {
  const base = {
    instance: "review",
    mode: "offline-snapshot" as const,
    vcs: "git" as const,
    files: 3,
    scope: "full" as const,
    bytes: 100,
    sha256: "ab".repeat(32),
    candidateId: "c1",
    candidatePath: "/w/.review/candidates/c1",
    currentPath: "/w/.review/current",
    previousId: undefined,
    agentDir: "/w/.review/agent",
    launchCommand: "cd /w/.review/current && PI_CODING_AGENT_DIR=/w/.review/agent pi",
    notes: [],
    live: undefined,
  };
  const offline = formatResult(base);
  expect(offline).toContain("OFFLINE SNAPSHOT (not live-ready");
  expect(offline).toContain("  scope:    full (the whole workspace installed and built)");
  expect(formatResult({ ...base, scope: "pi" })).toContain("  scope:    pi (installed and built only");
  expect(offline).toContain("\n  cd /w/.review/current && PI_CODING_AGENT_DIR=/w/.review/agent pi\n");
  const live = formatResult({
    ...base,
    mode: "live-ready",
    live: {
      model: "p/m",
      response: "ready",
      usage: { input: 9, output: 2, totalTokens: 11 },
      expiresAt: Date.UTC(2030, 0, 1),
      logPath: "/l",
    },
  });
  expect(live).toContain("LIVE-READY");
  expect(live).not.toContain("OFFLINE");
  expect(live).toContain("9 input + 2 output = 11 tokens");
  expect(live).toContain("expires 2030-01-01T00:00:00.000Z");
});
