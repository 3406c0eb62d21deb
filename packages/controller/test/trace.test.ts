// PI_SANDBOX_TRACE: timing marks of the CLI and its daemons in one file, each process's start
// included; nothing written when it is unset, and a mark never fails the work it watches.
import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { traceLine, traceMark, traceProcessStart } from "../src/trace.js";

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "trace-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The marks of a trace file: [ms, pid, what]. */
async function marks(file: string): Promise<[number, number, string][]> {
  return (await readFile(file, "utf8"))
    .split("\n")
    .filter(Boolean)
    .map((line) => {
      const [at, pid, ...what] = line.split(" ");
      return [Number(at), Number(pid), what.join(" ")];
    });
}

test("a mark is one line: the time in ms, the process and what happened, line breaks flattened", () => {
  expect(traceLine(1700000000123.5, 42, "daemon: [boot] a\nb")).toBe("1700000000123.5 42 daemon: [boot] a b\n");
});

test("with the variable set, marks go to its file; a process's start is marked at Node's own start", async () => {
  const file = join(dir, "trace");
  const env = { PI_SANDBOX_TRACE: file };
  traceProcessStart("test", env);
  traceMark("test: something", undefined, env);
  const got = await marks(file);
  expect(got.map(([, pid, what]) => [pid, what])).toEqual([
    [process.pid, "test: process started"],
    [process.pid, "test: modules loaded"],
    [process.pid, "test: something"],
  ]);
  expect(got[0]![0]).toBeCloseTo(performance.timeOrigin, 0);
  expect(got[1]![0]).toBeGreaterThanOrEqual(got[0]![0]);
});

test("unset, nothing is written; an unwritable file is no error", async () => {
  traceMark("nothing", undefined, {});
  traceProcessStart("nothing", {});
  expect(() => traceMark("lost", undefined, { PI_SANDBOX_TRACE: join(dir, "missing", "trace") })).not.toThrow();
});

test("the CLI marks its start, its modules and its end", async () => {
  const file = join(dir, "trace");
  execFileSync(process.execPath, [CLI, "--version"], { env: { ...process.env, PI_SANDBOX_TRACE: file } });
  expect((await marks(file)).map(([, , what]) => what)).toEqual([
    "cli: process started",
    "cli: modules loaded",
    "cli: done",
  ]);
});
