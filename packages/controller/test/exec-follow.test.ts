// The exec follower's logic over a scripted daemon: streaming, exit codes, --timeout, Ctrl-C
// (kill, then detach). cli-exec.vm.test.ts runs the same through the real CLI and a real guest.
import { EventEmitter } from "node:events";
import { followExec, type FollowIo } from "../src/cli/exec-follow.js";

interface Script {
  io: FollowIo;
  interrupts: EventEmitter;
  calls: Record<string, unknown>[];
  stdout: () => string;
  stderr: () => string;
}

type Reply = Record<string, unknown> | ((signal: AbortSignal) => Promise<Record<string, unknown>>);

/** A daemon answering exec/exec-status from `replies` in order, and exec-kill with `onKill`. */
function script(replies: Reply[], onKill: () => Record<string, unknown> = () => ({ killed: true })): Script {
  const interrupts = new EventEmitter();
  const calls: Record<string, unknown>[] = [];
  let stdout = "";
  let stderr = "";
  const io: FollowIo = {
    call: async (action, signal) => {
      calls.push(action);
      if (action.action === "exec-kill") return onKill();
      const reply = replies.shift();
      if (reply === undefined) throw new Error("no more replies");
      return typeof reply === "function" ? reply(signal) : reply;
    },
    out: (text) => (stdout += text),
    err: (text) => (stderr += text),
    interrupts,
    pollMs: 5,
  };
  return { io, interrupts, calls, stdout: () => stdout, stderr: () => stderr };
}

const running = (output: string) => ({ pid: "h1", running: true, output, truncatedBytes: 0 });
const exited = (output: string, exitCode: number) => ({
  pid: "h1",
  running: false,
  exitCode,
  output,
  truncatedBytes: 0,
});
const ACTION = { action: "exec", name: "demo", cmd: "make" };

/** A reply that waits until aborted (a long exec-status) or until `release` is called. */
function pending(): { reply: Reply; release: (value: Record<string, unknown>) => void } {
  let release!: (value: Record<string, unknown>) => void;
  const reply: Reply = (signal) =>
    new Promise((resolve, reject) => {
      release = resolve;
      signal.addEventListener("abort", () => reject(signal.reason), { once: true });
    });
  return { reply, release: (value) => release(value) };
}

test("streams each call's new output and exits with the command's code", async () => {
  const s = script([running("one\r"), running("\ntwo\n"), exited("three\n", 7)]);
  expect(await followExec(ACTION, { json: false }, s.io)).toBe(7);
  // The CR held back at the end of a chunk joins the LF of the next one.
  expect(s.stdout()).toBe("one\r\ntwo\nthree\n");
  expect(s.calls).toEqual([
    { ...ACTION, timeoutMs: 5 },
    { action: "exec-status", name: "demo", pid: "h1", timeoutMs: 5 },
    { action: "exec-status", name: "demo", pid: "h1", timeoutMs: 5 },
  ]);
  expect(s.interrupts.listenerCount("SIGINT")).toBe(0);
});

test("stderr kept apart by the guest goes to stderr, stdout to stdout; --json joins each", async () => {
  const replies = () => [
    { ...running("out1\n"), stderr: "err1\n", stderrTruncatedBytes: 0 },
    { ...exited("out2\n", 0), stderr: "err2\n", stderrTruncatedBytes: 3 },
  ];
  const s = script(replies());
  expect(await followExec(ACTION, { json: false }, s.io)).toBe(0);
  expect(s.stdout()).toBe("out1\nout2\n");
  expect(s.stderr()).toBe("err1\nerr2\n");
  const j = script(replies());
  await followExec(ACTION, { json: true }, j.io);
  expect(JSON.parse(j.stdout())).toMatchObject({
    output: "out1\nout2\n",
    stderr: "err1\nerr2\n",
    stderrTruncatedBytes: 3,
  });
});

test("--json prints one result when the command ends, with the output of every call", async () => {
  const s = script([running("a\n"), running(""), { ...running("b\n"), truncatedBytes: 3 }, exited("c\n", 2)]);
  expect(await followExec(ACTION, { json: true }, s.io)).toBe(2);
  expect(JSON.parse(s.stdout())).toEqual({ ...exited("a\nb\nc\n", 2), truncatedBytes: 3 });
});

test("--timeout stops following and prints the handle; the command is left running", async () => {
  // Each call waits its poll, as the agent does for a command that keeps running.
  const s = script(Array.from({ length: 1000 }, () => () => new Promise((r) => setTimeout(() => r(running(".")), 5))));
  expect(await followExec(ACTION, { json: false, timeoutMs: 30 }, s.io)).toBe(0);
  expect(s.stdout()).toMatch(/^\.+\[still running; follow with: pi-sandbox exec-status demo h1\]\n$/);
  expect(s.calls.some((c) => c.action === "exec-kill")).toBe(false);
});

test("Ctrl-C kills the command's process group, follows it to its end and exits 130", async () => {
  const wait = pending();
  const s = script([running("started\n"), wait.reply], () => {
    wait.release(exited("Terminated\n", 143));
    return { killed: true };
  });
  const done = followExec(ACTION, { json: false }, s.io);
  while (s.calls.length < 2) await new Promise((r) => setTimeout(r, 1));
  s.interrupts.emit("SIGINT");
  expect(await done).toBe(130);
  expect(s.calls.at(-1)).toEqual({ action: "exec-kill", name: "demo", pid: "h1" });
  expect(s.stdout()).toBe("started\nTerminated\n");
  expect(s.stderr()).toMatch(/interrupted: ending the command; press Ctrl-C again to leave it running/);
});

test("Ctrl-C before the handle arrives kills the command as soon as it does", async () => {
  const first = pending();
  const s = script([first.reply, exited("", 143)]);
  const done = followExec(ACTION, { json: false }, s.io);
  await new Promise((r) => setTimeout(r, 1));
  s.interrupts.emit("SIGINT");
  first.release(running(""));
  expect(await done).toBe(130);
  expect(s.calls.map((c) => c.action)).toEqual(["exec", "exec-kill", "exec-status"]);
});

test("a second Ctrl-C detaches at once and prints the handle", async () => {
  const wait = pending();
  // exec-kill hangs (a process that ignores SIGTERM, before the agent's SIGKILL): detach anyway.
  const s = script([running(""), wait.reply], () => new Promise(() => undefined) as never);
  const done = followExec(ACTION, { json: false }, s.io);
  while (s.calls.length < 2) await new Promise((r) => setTimeout(r, 1));
  s.interrupts.emit("SIGINT");
  s.interrupts.emit("SIGINT");
  expect(await done).toBe(130);
  expect(s.stderr()).toMatch(
    /\[detached; the command may still be running: pi-sandbox exec-status demo h1 follows it, pi-sandbox exec-kill demo h1 ends it\]/,
  );
  expect(s.interrupts.listenerCount("SIGINT")).toBe(0);
});

test("a failed call is the caller's error, after the listener is gone", async () => {
  const s = script([running(""), () => Promise.reject(new Error("daemon lost"))]);
  await expect(followExec(ACTION, { json: false }, s.io)).rejects.toThrow("daemon lost");
  expect(s.interrupts.listenerCount("SIGINT")).toBe(0);
});
