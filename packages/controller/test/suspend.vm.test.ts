// Suspend and warm start on a real VM through the client API: one instance, four starts (one
// after a daemon killed during a suspend).
import { readFileSync } from "node:fs";
import { rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { StateLayout } from "../src/client/index.js";
import { pidAlive } from "../src/state/liveness.js";
import { readStatus } from "../src/state/records.js";
import { fetchText, makeSandbox, qemuFor, SEED_YAML, teardown, type Sandbox } from "../src/testing.js";

let sandbox: Sandbox;
let call: Sandbox["call"];

beforeAll(async () => {
  sandbox = await makeSandbox("psu-");
  await sandbox.writeConfig(SEED_YAML);
  call = sandbox.call;
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

const exec = async (cmd: string) => (await call({ action: "exec", name: "warm", cmd })).output as string;
/** The supervisor's last word in the instance log on how it reached the agent. */
const lastAgentLine = () =>
  readFileSync(new StateLayout(sandbox.home).logFile("instances", "warm"), "utf8")
    .split("\n")
    .filter((line) => /\[supervisor warm\] (agent \S+ up|attached to the running agent)/.test(line))
    .at(-1);
const webPid = async () => (await call({ action: "services", name: "warm", op: "status" })).services[0].pid as number;

test("a suspended instance resumes with its processes and previews; without its memory it boots cold and says why; a daemon killed mid-suspend leaves the last checkpoint; destroy leaves nothing", async () => {
  const created = await call({ action: "create", name: "warm", config: "sandbox.yaml" });
  const url = created.previews[0].url as string;
  const sleeper = (await exec("sleep 1000 > /dev/null 2>&1 & echo $!")).trim();
  await exec("echo kept > kept.txt");
  expect(sleeper).toMatch(/^\d+$/);
  const servicePid = await webPid();
  const diskDir = new StateLayout(sandbox.home).diskDir("instances", "warm");

  const suspended = await call({ action: "suspend", name: "warm" });
  expect(suspended).toMatchObject({ state: "suspended", previews: [] });
  await expect(fetch(url)).rejects.toThrow();
  expect(qemuFor(sandbox.home)).toEqual([]);
  await stat(join(diskDir, "memory.bin"));

  const progress: string[] = [];
  const warm = await call(
    { action: "start", name: "warm" },
    { onProgress: (e) => progress.push(`[${e.stage}] ${e.message}`) },
  );
  expect(warm).toMatchObject({ state: "running", restore: { warm: true } });
  expect(progress).toContainEqual(expect.stringMatching(/^\[boot\] resumed from saved memory in \d+\.\d s/));
  expect(progress.some((p) => p.startsWith("[resume]"))).toBe(false);
  expect(warm.previews[0].url).toBe(url);
  expect(await fetchText(url)).toBe("200 Hello from the guest\n");
  expect(await exec(`kill -0 ${sleeper} && echo alive`)).toBe("alive\n");
  expect(await webPid()).toBe(servicePid);
  await expect(stat(join(diskDir, "memory.bin"))).rejects.toMatchObject({ code: "ENOENT" });
  // The resumed agent was reached through the TCP door it gave before the suspend: no exec.
  expect(lastAgentLine()).toMatch(/attached to the running agent \S+ \(pid \d+\) through its TCP door$/);

  await call({ action: "suspend", name: "warm" });
  await rm(join(diskDir, "memory.bin"));
  const coldProgress: string[] = [];
  const cold = await call(
    { action: "start", name: "warm" },
    { onProgress: (e) => coldProgress.push(`[${e.stage}] ${e.message}`) },
  );
  const reason = "the memory file is missing";
  expect(cold).toMatchObject({ state: "running", restore: { warm: false, reason } });
  expect(coldProgress).toContainEqual(expect.stringContaining(reason));
  expect((await call({ action: "inspect", name: "warm" })).restore).toEqual({ warm: false, reason });
  expect(cold.previews[0].url).toBe(url);
  expect(await fetchText(url)).toBe("200 Hello from the guest\n");
  expect(await exec(`kill -0 ${sleeper} 2>/dev/null && echo alive || echo gone`)).toBe("gone\n");
  // A cold boot's agent is a new one (the image's init started it): the old door is not tried.
  expect(lastAgentLine()).toMatch(/agent \S+ up \(started at boot, /);

  // SIGKILL of the daemon during a suspend: the instance reads interrupted, and start reopens the
  // newest state, cold: the run's disk as the kill left it, with what the guest synced before.
  expect(await exec("cat kept.txt")).toBe("kept\n");
  await exec("echo synced > kept.txt && sync");
  const daemonPid = (await call({ action: "inspect", name: "warm" })).daemonPid as number;
  const layout = new StateLayout(sandbox.home);
  const suspending = call({ action: "suspend", name: "warm" }).catch((e: unknown) => e);
  for (let i = 0; i < 400 && (await readStatus(layout, "instances", "warm"))?.state !== "suspending"; i++)
    await new Promise((r) => setTimeout(r, 10));
  process.kill(daemonPid, "SIGKILL");
  expect(await suspending).toMatchObject({ code: expect.stringMatching(/^CONTROLLER_DAEMON_/) });
  // A killed process finishes exiting on its own time (a thread in the kernel, a busy disk).
  for (let i = 0; i < 600 && pidAlive(daemonPid); i++) await new Promise((r) => setTimeout(r, 100));
  expect((await call({ action: "inspect", name: "warm" })).state).toBe("interrupted");
  const reopened = await call({ action: "start", name: "warm" });
  expect(reopened.state).toBe("running");
  expect(reopened.restore?.warm).not.toBe(true);
  expect(reopened.recovery).toMatchObject({ outcome: "recovered" });
  expect(await exec("cat kept.txt")).toBe("synced\n");

  await call({ action: "suspend", name: "warm" });
  await stat(join(diskDir, "memory.bin"));
  expect(await call({ action: "destroy", name: "warm", confirm: "warm" })).toEqual({
    destroyed: "warm",
    kind: "instances",
  });
  await expect(stat(new StateLayout(sandbox.home).entryDir("instances", "warm"))).rejects.toMatchObject({
    code: "ENOENT",
  });
  expect(qemuFor(sandbox.home)).toEqual([]);
});
