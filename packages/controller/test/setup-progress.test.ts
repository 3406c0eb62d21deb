// Setup progress from the guest's setup log: step lines become `$ <command>`, output is indented,
// cut and counted past a per-read budget, and an earlier run's log is never shown.
import type { SetupFollowed } from "@pi-sandbox/supervisor";
import { LINE_CHARS, OUTPUT_LINES_PER_READ, setupLogLines, withSetupProgress } from "../src/daemon/setup-progress.js";
import type { ProgressEvent } from "../src/wire.js";

const T = "[pi-sandbox 2026-12-01T20:00:00.000Z]";

function collect(): { events: ProgressEvent[]; messages: () => string[] } {
  const events: ProgressEvent[] = [];
  return { events, messages: () => events.map((e) => e.message) };
}

test("step lines become commands, output is indented, a line split across reads is joined", () => {
  const { events, messages } = collect();
  const lines = setupLogLines((e) => events.push(e));
  lines.push(`${T} setup step 1/2: npm ci\nadded 3 pack`);
  lines.push(`ages\n${T} setup step 2/2: make\n`);
  lines.push(`${T} stopped 0 leftover process(es) (environ)\n`);
  lines.push("no newline at the end");
  lines.end();
  expect(messages()).toEqual(["$ npm ci (1/2)", "  added 3 packages", "$ make (2/2)", "  no newline at the end"]);
  expect(events.every((e) => e.stage === "setup")).toBe(true);
});

test("a flood is cut to the per-read budget and counted; long and unended lines are cut", () => {
  const { messages } = (() => {
    const c = collect();
    const lines = setupLogLines((e) => c.events.push(e));
    lines.push(Array.from({ length: 50 }, (_, i) => `line ${i}\n`).join(""));
    lines.push("x".repeat(10 * LINE_CHARS));
    lines.end();
    return c;
  })();
  const shown = messages();
  expect(shown.slice(0, OUTPUT_LINES_PER_READ)).toEqual(
    Array.from({ length: OUTPUT_LINES_PER_READ }, (_, i) => `  line ${i}`),
  );
  expect(shown[OUTPUT_LINES_PER_READ]).toBe(`  … ${50 - OUTPUT_LINES_PER_READ} more line(s) of output`);
  expect(shown.every((m) => m.length <= LINE_CHARS + 2)).toBe(true);
});

test("withSetupProgress follows the run from its cursor, skips an earlier run's log, and reads the end", async () => {
  const events: ProgressEvent[] = [];
  const reads: (string | undefined)[] = [];
  let finish: (value: string) => void = () => undefined;
  const run = new Promise<string>((resolve) => (finish = resolve));
  const answers: SetupFollowed[] = [
    { running: false, text: `${T} setup step 1/1: old run\n`, cursor: "9:30", more: false },
    { running: true, text: `${T} setup step 1/1: echo hi\n`, cursor: "7:40", more: false },
    { running: true, text: "hi\n", cursor: "7:43", more: false },
    { running: false, text: `${T} stopped 2 leftover process(es) (cgroup)\n`, cursor: "7:90", more: false },
  ];
  const supervisor = {
    followSetup: async (options: { cursor?: string } = {}) => {
      reads.push(options.cursor);
      const next = answers.shift()!;
      if (answers.length === 1) finish("done");
      return next;
    },
  };
  const result = await withSetupProgress(supervisor, (e) => events.push(e), run, 5);
  expect(result).toBe("done");
  expect(events.map((e) => e.message)).toEqual(["$ echo hi (1/1)", "  hi", "stopped 2 leftover process(es) (cgroup)"]);
  // The skipped read did not move the cursor; each later read starts where the last ended.
  expect(reads).toEqual([undefined, undefined, "7:40", "7:43"]);
});

test("a failing read stops the stream, not the setup", async () => {
  const events: ProgressEvent[] = [];
  let finish: (value: number) => void = () => undefined;
  const run = new Promise<number>((resolve) => (finish = resolve));
  const supervisor = {
    followSetup: async (): Promise<SetupFollowed> => {
      setTimeout(() => finish(0), 20);
      throw new Error("UNKNOWN_OP");
    },
  };
  await expect(withSetupProgress(supervisor, (e) => events.push(e), run, 5)).resolves.toBe(0);
  expect(events).toEqual([]);
});
