// Exec handles as a user meets them through the client on a real VM: output capped per call with
// the cut counted, a kill that takes the whole process group, waits that end without ending the
// command, and handles that expire oldest first once more than 128 finished ones pile up.
import { makeSandbox, teardown, type Sandbox } from "@pi-sandbox/controller/testing";

let sandbox: Sandbox;

beforeAll(async () => {
  sandbox = await makeSandbox("psx-");
  await sandbox.writeConfig("profile: tiny\ndiskGiB: 4\n");
  await sandbox.call({ action: "create", name: "x", config: "sandbox.yaml" });
}, 300_000);

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
}, 300_000);

const exec = (cmd: string, timeoutMs?: number) =>
  sandbox.call({ action: "exec", name: "x", cmd, ...(timeoutMs === undefined ? {} : { timeoutMs }) });
const status = (pid: string, timeoutMs = 0) => sandbox.call({ action: "exec-status", name: "x", pid, timeoutMs });

test("output over 64 KiB per call keeps its head and tail around a marker counting the cut; a running command returns only new output", async () => {
  const done = await exec("python3 -c \"import sys; sys.stdout.write('a' * 200000 + 'END')\"");
  expect(done).toMatchObject({ running: false, exitCode: 0 });
  expect(Buffer.byteLength(done.output)).toBeLessThanOrEqual(64 * 1024);
  // Head and tail are kept, with a marker in between that counts what was left out.
  const marker = `\n[... pi-sandbox: ${done.truncatedBytes} bytes of output omitted ...]\n`;
  const [head, tail] = (done.output as string).split(marker);
  expect(head).toMatch(/^a+$/);
  expect(tail).toMatch(/^a+END$/);
  expect(head!.length + tail!.length + done.truncatedBytes).toBe(200003);

  // A running command: each status returns only new output.
  const slow = await exec("for i in 1 2 3; do echo tick $i; sleep 1; done", 100);
  expect(slow.running).toBe(true);
  let seen = slow.output as string;
  let last = slow;
  while (last.running) {
    last = await status(slow.pid, 1500);
    seen += last.output;
  }
  expect(seen).toBe("tick 1\ntick 2\ntick 3\n");
  expect(last.exitCode).toBe(0);
});

test("exec-kill ends the whole process group, even a child the command started in the background", async () => {
  const started = await exec("sleep 311 & sleep 312; echo never", 500);
  expect(started.running).toBe(true);
  expect((await exec("pgrep -c -f 'sleep 31[12]'")).output.trim()).toBe("2");
  await sandbox.call({ action: "exec-kill", name: "x", pid: started.pid });
  const ended = await status(started.pid, 10_000);
  expect(ended.running).toBe(false);
  expect(ended.output).not.toContain("never");
  expect(ended.exitCode).toBeGreaterThan(128);
  expect((await exec("pgrep -f 'sleep 31[12]' || echo none")).output.trim()).toBe("none");
});

test("a wait that times out leaves the command running; finished handles expire oldest first past 128", async () => {
  const launched: string[] = [];
  for (let i = 0; i < 140; i++) {
    const r = await exec(`sleep 0.5; echo job ${i}`, 0);
    expect(r.running).toBe(true);
    launched.push(r.pid as string);
  }
  // Let every job finish, unread.
  expect(await status(launched.at(-1)!, 30_000)).toMatchObject({ running: false, output: "job 139\n" });
  await expect(status(launched[0]!)).rejects.toMatchObject({ code: "EXEC_HANDLE_EXPIRED" });
  const kept = await status(launched[20]!);
  expect(kept).toMatchObject({ running: false, exitCode: 0, output: "job 20\n" });
  // Read once, a handle keeps its final status without the output.
  expect(await status(launched[20]!)).toMatchObject({ running: false, exitCode: 0, output: "" });
  await expect(status("x0000000000000000")).rejects.toMatchObject({ code: "EXEC_HANDLE_NOT_FOUND" });
}, 600_000);
