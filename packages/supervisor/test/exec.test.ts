// exec, exec-status and exec-kill through the real agent as a host process: output and exit codes,
// waits that block nothing else, bounded output marked where it was cut, kills of whole process groups.
import { mkdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { isSupervisorError } from "../src/index.js";
import { listDir, processAlive, startLocal, waitFor, type LocalSupervisor } from "./support/local.js";

let sup: LocalSupervisor;
beforeAll(async () => {
  sup = await startLocal();
});
afterAll(async () => {
  await sup?.close();
});

test("a finished command returns its interleaved output and exit code", async () => {
  const result = await sup.client.exec("echo out; echo err >&2; exit 3");
  expect(result).toMatchObject({ running: false, exitCode: 3, output: "out\nerr\n", truncatedBytes: 0 });
  expect(result.handle).toMatch(/^x[0-9a-f]+$/);
});

test("separateStderr keeps stderr apart, in exec and in exec-status of the same handle", async () => {
  const first = await sup.client.exec("echo out; echo err >&2; sleep 1; echo out2; echo err2 >&2; exit 4", {
    separateStderr: true,
    timeoutMs: 300,
  });
  expect(first).toMatchObject({ running: true, output: "out\n", stderr: "err\n", stderrTruncatedBytes: 0 });
  const rest = await sup.client.execStatus(first.handle, { timeoutMs: 10_000 });
  expect(rest).toMatchObject({ running: false, exitCode: 4, output: "out2\n", stderr: "err2\n" });
});

test("cwd is relative to the workspace, and a missing one is a typed error", async () => {
  await mkdir(join(sup.workspace, "app"), { recursive: true });
  const result = await sup.client.exec("pwd", { cwd: "app" });
  expect(result.output.trim()).toBe(join(sup.workspace, "app"));
  await expect(sup.client.exec("pwd", { cwd: "nope" })).rejects.toMatchObject({ code: "CWD_NOT_FOUND" });
});

test("the timeout ends only the wait; exec-status returns only new output", async () => {
  const started = await sup.client.exec("echo first; sleep 1; echo second", { timeoutMs: 300 });
  expect(started).toMatchObject({ running: true, output: "first\n" });
  expect(started.exitCode).toBeUndefined();
  const finished = await sup.client.execStatus(started.handle, { timeoutMs: 5_000 });
  expect(finished).toMatchObject({ running: false, exitCode: 0, output: "second\n" });
  // A completed handle keeps its final status after its output was read (and its files freed).
  const again = await sup.client.execStatus(started.handle, { timeoutMs: 0 });
  expect(again).toMatchObject({ running: false, exitCode: 0, output: "" });
  expect(await listDir(join(sup.stateDir, "exec"))).not.toContain(`${started.handle}.out`);
});

test("timeoutMs outside 0-60000 is rejected before anything runs", async () => {
  await expect(sup.client.exec("true", { timeoutMs: 60_001 })).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
  await expect(sup.client.exec("true", { timeoutMs: -1 })).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
  await expect(sup.client.exec("  ")).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
});

test("output beyond 64 KiB per call is cut with an explicit marker, keeping head and tail", async () => {
  const result = await sup.client.exec(
    "echo HEAD-LINE; python3 -c \"import sys; sys.stdout.write('x' * 200000)\"; echo; echo TAIL-LINE",
  );
  expect(result.exitCode).toBe(0);
  expect(Buffer.byteLength(result.output)).toBeLessThanOrEqual(64 * 1024);
  expect(result.output.startsWith("HEAD-LINE\n")).toBe(true);
  expect(result.output.endsWith("TAIL-LINE\n")).toBe(true);
  expect(result.output).toMatch(/\[\.\.\. pi-sandbox: \d+ bytes of output omitted \.\.\.\]/);
  expect(result.truncatedBytes).toBeGreaterThan(200_000 - 64 * 1024);
});

test("a running command's unread output file is bounded; what was dropped is marked", async () => {
  const started = await sup.client.exec("head -c 40000000 /dev/zero | tr '\\0' a; sleep 3; echo; echo END", {
    timeoutMs: 0,
  });
  const file = join(sup.stateDir, "exec", `${started.handle}.out`);
  await new Promise((r) => setTimeout(r, 2_500));
  // What the file holds on disk stays bounded (its apparent size may not: dropped spans are holes).
  expect((await stat(file)).blocks * 512).toBeLessThanOrEqual(16 * 1024 * 1024 + 1024 * 1024);
  const done = await sup.client.execStatus(started.handle, { timeoutMs: 20_000 });
  expect(done).toMatchObject({ running: false, exitCode: 0 });
  expect(done.output).toMatch(/^\[\.\.\. pi-sandbox: \d+ bytes of output were dropped unread/);
  expect(done.output.endsWith("END\n")).toBe(true);
  // Every byte is either returned or counted as left out.
  const text = done.output
    .split("\n")
    .filter((line) => !line.startsWith("[... pi-sandbox:"))
    .join("");
  const returned = (text.match(/a/g) ?? []).length;
  expect(returned + done.truncatedBytes).toBe(40_000_000);
});

test("kill terminates the whole process group, background children included", async () => {
  const pidFile = join(sup.root, "bg.pid");
  const started = await sup.client.exec(`sleep 300 & echo $! > ${pidFile}; sleep 300`, { timeoutMs: 500 });
  expect(started.running).toBe(true);
  const bgPid = Number((await readFile(pidFile, "utf8")).trim());
  expect(await processAlive(bgPid)).toBe(true);
  const killed = await sup.client.execKill(started.handle);
  expect(killed).toMatchObject({ killed: true, running: false, signal: "SIGTERM", exitCode: 143 });
  await waitFor(async () => !(await processAlive(bgPid)), 5_000, "background child to die");
});

test("a kill is not held up by a long wait on the same handle", async () => {
  const started = await sup.client.exec("sleep 300", { timeoutMs: 0 });
  const t0 = Date.now();
  const waiting = sup.client.execStatus(started.handle, { timeoutMs: 60_000 });
  await new Promise((r) => setTimeout(r, 300));
  await sup.client.execKill(started.handle);
  const status = await waiting;
  expect(status.running).toBe(false);
  expect(Date.now() - t0).toBeLessThan(5_000);
});

test("waits never block other commands or file operations", async () => {
  const slow = await sup.client.exec("sleep 300", { timeoutMs: 0 });
  const waiting = sup.client.execStatus(slow.handle, { timeoutMs: 20_000 });
  const t0 = Date.now();
  const quick = await sup.client.exec("echo quick");
  await sup.client.writeFile(join(sup.workspace, "during-wait.txt"), "hello");
  const text = await sup.client.readText(join(sup.workspace, "during-wait.txt"));
  expect(Date.now() - t0).toBeLessThan(3_000);
  expect(quick.output).toBe("quick\n");
  expect(text.content).toBe("hello");
  await sup.client.execKill(slow.handle);
  await waiting;
});

test("only the 128 most recently completed handles are kept; older ones expire first", async () => {
  const handles: string[] = [];
  for (let batch = 0; batch < 10; batch++) {
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => sup.client.exec(`echo ${batch * 20 + i}`, { timeoutMs: 0 })),
    );
    handles.push(...results.map((r) => r.handle));
    // Let this batch finish so completion order follows launch order closely.
    await Promise.all(
      results.map((r) => sup.client.execStatus(r.handle, { timeoutMs: 10_000 }).catch(() => undefined)),
    );
  }
  expect(handles).toHaveLength(200);
  const newest = await sup.client.execStatus(handles[199]!, { timeoutMs: 0 });
  expect(newest).toMatchObject({ running: false, exitCode: 0 });
  const oldest = await sup.client.execStatus(handles[0]!, { timeoutMs: 0 }).catch((error: unknown) => error);
  expect(isSupervisorError(oldest, "EXEC_HANDLE_EXPIRED")).toBe(true);
  let kept = 0;
  for (const handle of handles) {
    try {
      await sup.client.execStatus(handle, { timeoutMs: 0 });
      kept++;
    } catch (error) {
      expect(isSupervisorError(error, "EXEC_HANDLE_EXPIRED")).toBe(true);
    }
  }
  // Batches finish in launch order, so the newest 128 completions are all from these 200.
  expect(kept).toBe(128);
  for (const handle of handles.slice(80)) {
    await expect(sup.client.execStatus(handle, { timeoutMs: 0 })).resolves.toMatchObject({ running: false });
  }
  // Expired handles took their output files with them.
  expect((await listDir(join(sup.stateDir, "exec"))).length).toBeLessThanOrEqual(128);
});

test("an unknown handle is a typed error", async () => {
  await expect(sup.client.execStatus("xdeadbeef", { timeoutMs: 0 })).rejects.toMatchObject({
    code: "EXEC_HANDLE_NOT_FOUND",
  });
});

test("aborting a wait rejects with the signal's reason and leaves the command running", async () => {
  const started = await sup.client.exec("sleep 300", { timeoutMs: 0 });
  const controller = new AbortController();
  const waiting = sup.client.execStatus(started.handle, { timeoutMs: 30_000, signal: controller.signal });
  controller.abort(new Error("stop waiting"));
  await expect(waiting).rejects.toThrow("stop waiting");
  const status = await sup.client.execStatus(started.handle, { timeoutMs: 0 });
  expect(status.running).toBe(true);
  await sup.client.execKill(started.handle);
  const aborted = new AbortController();
  aborted.abort(new Error("before"));
  await expect(sup.client.exec("true", { signal: aborted.signal })).rejects.toThrow("before");
});

test("activity tells a running handle apart, and how long ago the last command ended", async () => {
  const started = await sup.client.exec("sleep 1", { timeoutMs: 0 });
  expect(await sup.client.activity()).toMatchObject({ runningJobs: 1 });
  await sup.client.execStatus(started.handle, { timeoutMs: 10_000 });
  await new Promise((r) => setTimeout(r, 300));
  const after = await sup.client.activity();
  expect(after?.runningJobs).toBe(0);
  expect(after?.jobsIdleMs).toBeGreaterThanOrEqual(250);
});
