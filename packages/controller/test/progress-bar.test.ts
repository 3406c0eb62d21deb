// The CLI's progress printing: plain lines, JSON lines, and a copy's byte bar on a terminal.
import { progressPrinter, renderBar } from "../src/cli/progress-bar.js";

function capture(isTTY: boolean, json = false) {
  let escaped = "";
  let raw = "";
  const printer = progressPrinter(json, (text) => (escaped += text), {
    isTTY,
    columns: 60,
    write: (text: string) => (raw += text),
  });
  return { printer, escaped: () => escaped, raw: () => raw };
}

test("a bar shows the share, the MiB and the file, cut to the terminal's width", () => {
  const bar = renderBar(
    { stage: "copy", message: "dir/".repeat(30) + "file.bin", done: 5 * 1048576, total: 20 * 1048576 },
    80,
  );
  expect(bar).toMatch(/^\[copy\] \[#{6}\.{18}\]  25%  5\.0 MiB\/20\.0 MiB  …/);
  expect(bar.length).toBe(79);
  expect(bar.endsWith("file.bin")).toBe(true);
  // Guest file names cannot put escape sequences into the bar.
  expect(renderBar({ stage: "copy", message: "a\x1b[2Jb", done: 1, total: 1 })).toContain("a\\x1b[2Jb");
});

test("on a terminal byte ticks redraw one line, which ends before the next plain line", () => {
  const t = capture(true);
  t.printer.print({ stage: "copy", message: "f", done: 1, total: 2 });
  t.printer.print({ stage: "copy", message: "f", done: 2, total: 2 });
  t.printer.print({ stage: "boot", message: "next" });
  expect(t.raw()).toMatch(/^\r\x1b\[2K\[copy\] .* 50% .*\r\x1b\[2K\[copy\] .*100% .*\n$/);
  expect(t.escaped()).toMatch(/^\[\d+\.\ds boot\] next\n$/);
});

test("in a pipe byte ticks are left out; with --json they are JSON lines with done and total", () => {
  const pipe = capture(false);
  pipe.printer.print({ stage: "copy", message: "f", done: 1, total: 2 });
  pipe.printer.end();
  expect(pipe.raw() + pipe.escaped()).toBe("");
  const json = capture(false, true);
  json.printer.print({ stage: "copy", message: "f", done: 1, total: 2 });
  json.printer.print({ stage: "boot", message: "x" });
  expect(
    json
      .escaped()
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l)),
  ).toEqual([
    { progress: { stage: "copy", message: "f", done: 1, total: 2 } },
    { progress: { stage: "boot", message: "x" } },
  ]);
});
