// Liveness by pid as the daemon and the QEMU reaper see it: a zombie (exited, not yet reaped by its
// parent) is gone, whichever of pidAlive and isAlive is asked.
import { spawn, type ChildProcess } from "node:child_process";
import { readdirSync } from "node:fs";
import { isAlive, pidAlive, processStartTime, readProcStat } from "../src/process-util.js";

const linux = process.platform === "linux";

/** The pid of a child of `parent`, read from /proc (undefined until it exists). */
function childOf(parent: number): number | undefined {
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (Number.isInteger(pid) && readProcStat(pid)?.ppid === parent) return pid;
  }
  return undefined;
}

async function until<T>(probe: () => T | undefined, timeoutMs = 5_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

let parent: ChildProcess | undefined;
afterEach(() => {
  parent?.kill("SIGKILL");
  parent = undefined;
});

(linux ? test : test.skip)("an exited child that its parent has not reaped is not alive", async () => {
  // `sleep 0.1` becomes a child of the exec'd `sleep 5`, which never waits for it: a zombie.
  parent = spawn("sh", ["-c", "sleep 0.1 & exec sleep 5"], { stdio: "ignore" });
  const parentPid = parent.pid!;
  const zombie = await until(() => childOf(parentPid));
  await until(() => (readProcStat(zombie)?.state === "Z" ? true : undefined));

  expect(pidAlive(zombie)).toBe(false);
  expect(isAlive({ pid: zombie })).toBe(false);
  expect(isAlive({ pid: zombie, startTime: processStartTime(zombie)! })).toBe(false);
  // Its parent, running, is alive.
  expect(pidAlive(parentPid)).toBe(true);
  expect(isAlive({ pid: parentPid, startTime: processStartTime(parentPid)! })).toBe(true);
});

test("a pid that is not a process is not alive; this process is", () => {
  expect(pidAlive(0)).toBe(false);
  expect(pidAlive(-1)).toBe(false);
  expect(pidAlive(1.5)).toBe(false);
  expect(pidAlive(process.pid)).toBe(true);
});

(linux ? test : test.skip)("a reused pid does not pass for the process that had it", () => {
  const startTime = processStartTime(process.pid)!;
  expect(isAlive({ pid: process.pid, startTime })).toBe(true);
  expect(isAlive({ pid: process.pid, startTime: `${startTime}0` })).toBe(false);
});
