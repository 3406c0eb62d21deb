// A daemon killed but not yet reaped by its parent (a zombie) reads gone, so its instance is
// reported interrupted instead of running.
import { spawn } from "node:child_process";
import { pidAlive } from "../src/state/liveness.js";

test("a zombie is not alive: a killed daemon its parent has not reaped yet reads gone", async () => {
  // The shell's background child exits after 1 s; by then the shell has been replaced by `sleep`,
  // which never reaps it, so it stays a zombie while `sleep` runs. (A child that exited at once
  // was sometimes reaped by the shell itself before its exec, on a busy host.)
  const parent = spawn("sh", ["-c", "sleep 1 & echo $!; exec sleep 8"], { stdio: ["ignore", "pipe", "ignore"] });
  const pid = await new Promise<number>((resolve) => parent.stdout.once("data", (d: Buffer) => resolve(Number(d))));
  try {
    await new Promise((r) => setTimeout(r, 2500));
    expect(() => process.kill(pid, 0)).not.toThrow(); // the kernel still knows the pid
    expect(pidAlive(pid)).toBe(false);
    expect(pidAlive(parent.pid!)).toBe(true);
  } finally {
    parent.kill("SIGKILL");
  }
});
