// Suspend, warm starts and warm templates on real VMs through the client API, with one cold boot
// for the file (the template's). A template prepared with `suspend` saves its guest running, and
// each `create -t` resumes that guest (its service already up) instead of booting, then gives it
// its own machine-id, hostname, ssh host keys and kernel randomness. Then one of those clones, a
// running instance like any other, is suspended and started four times: warm with its processes
// and previews, cold without its memory (saying why), after a daemon killed mid-suspend, and
// suspended once more before destroy. (A fresh instance of its own would only add a cold boot.)
import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { readFile, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { StateLayout } from "../src/client/index.js";
import { pidAlive } from "../src/state/liveness.js";
import { readStatus } from "../src/state/records.js";
import { fetchText, makeSandbox, qemuFor, qemuGone, teardown, until, type Sandbox } from "../src/testing.js";

let sandbox: Sandbox;
let call: Sandbox["call"];

// The template's setup makes ssh host keys and a machine-id: the clones must not keep them.
const TEMPLATE_YAML = `profile: tiny
diskGiB: 4
setup:
  - printf 'Hello from the guest\\n' > /workspace/index.html
  - ssh-keygen -A
  - od -An -N16 -tx1 /dev/urandom | tr -d ' \\n' > /etc/machine-id
services:
  web:
    command: python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
`;

beforeAll(async () => {
  sandbox = await makeSandbox("psu-");
  await sandbox.writeConfig(TEMPLATE_YAML);
  call = sandbox.call;
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

/** Output of `cmd` in `name`; waits up to 60 s (a TCG guest on a busy host is slow). */
const exec = async (name: string, cmd: string) =>
  (await call({ action: "exec", name, cmd, timeoutMs: 60_000 })).output as string;

test("two instances from a suspended template resume its running guest, each with its own identity and randomness", async () => {
  const prepared = await call({ action: "prepare", name: "tpl", config: "sandbox.yaml", suspend: true });
  expect(prepared).toMatchObject({ state: "prepared", savedMemory: { bytes: expect.any(Number) } });
  const memoryFile = join(new StateLayout(sandbox.home).diskDir("templates", "tpl"), "memory.bin");
  expect((await stat(memoryFile)).size).toBeGreaterThan(1024 * 1024);

  const clones = ["c1", "c2"];
  const progress = new Map<string, string[]>();
  for (const name of clones) {
    const lines: string[] = [];
    progress.set(name, lines);
    const created = await call(
      { action: "create", name, template: "tpl" },
      { onProgress: (e) => lines.push(`[${e.stage}] ${e.message}`) },
    );
    expect(created).toMatchObject({ state: "running", restore: { warm: true }, lastStart: { warm: true } });
    expect(await fetchText(created.previews[0].url)).toBe("200 Hello from the guest\n");
  }
  for (const lines of progress.values()) {
    expect(lines).toContainEqual(expect.stringMatching(/^\[boot\] resumed from saved memory in \d+\.\d s/));
    expect(lines).toContainEqual(expect.stringMatching(/its own machine-id, hostname and ssh host keys/));
    // Resumed, not booted: no setup, no resume hooks, no service start.
    expect(lines.some((l) => l.startsWith("[setup]") || l.startsWith("[resume]"))).toBe(false);
  }
  // Each copy reached the template's running agent through the TCP door the template recorded,
  // without an exec.
  const layout = new StateLayout(sandbox.home);
  for (const name of clones) {
    const log = await readFile(layout.logFile("instances", name), "utf8");
    expect(log).toMatch(/attached to the running agent \S+ \(pid \d+\) through its TCP door/);
  }

  const read = async (cmd: string) => Promise.all(clones.map((name) => exec(name, cmd)));
  const bootIds = await read("cat /proc/sys/kernel/random/boot_id");
  expect(bootIds[0]).toMatch(/^[0-9a-f-]{36}\n$/);
  expect(bootIds[1]).not.toBe(bootIds[0]);
  const random = await read("head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'");
  expect(random[0]).toMatch(/^[0-9a-f]{64}$/);
  expect(random[1]).not.toBe(random[0]);
  const machineIds = await read("cat /etc/machine-id");
  expect(machineIds[0]).toMatch(/^[0-9a-f]{32}\n$/);
  expect(machineIds[1]).not.toBe(machineIds[0]);
  expect(await read("hostname; cat /etc/hostname")).toEqual(["c1\nc1\n", "c2\nc2\n"]);
  // The template's host keys are gone; the keys each one makes now are its own.
  expect(await read("ls /etc/ssh | grep -c ssh_host_ || true")).toEqual(["0\n", "0\n"]);
  const hostKeys = await read(
    "ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key && cut -d' ' -f2 /etc/ssh/ssh_host_ed25519_key.pub",
  );
  expect(hostKeys[0]).toMatch(/^AAAA/);
  expect(hostKeys[1]).not.toBe(hostKeys[0]);

  // Each start consumed only its own link to the template's memory: the template keeps it whole.
  const kept = await stat(memoryFile);
  const record = JSON.parse(await readFile(join(memoryFile, "..", "suspend.json"), "utf8"));
  expect(kept.size).toBe(record.bytes);
  expect(kept.nlink).toBe(1);

  // A later cold start of a clone boots its own checkpoint: its identity stays, nothing is redone.
  await call({ action: "stop", name: "c1" });
  const restarted = await call({ action: "start", name: "c1" });
  expect(restarted).toMatchObject({ state: "running", lastStart: { warm: false } });
  expect(await exec("c1", "cat /etc/machine-id /etc/hostname")).toBe(`${machineIds[0]}c1\n`);
  expect(await fetchText(restarted.previews[0].url)).toBe("200 Hello from the guest\n");
  // Only c2 runs on: the next test counts every QEMU of the state root.
  await call({ action: "stop", name: "c1" });
});

/** The supervisor's lines in c2's instance log on how it reached the agent, oldest first. */
const agentLines = () =>
  readFileSync(new StateLayout(sandbox.home).logFile("instances", "c2"), "utf8")
    .split("\n")
    .filter((line) => /\[supervisor c2\] (agent \S+ up|attached to the running agent)/.test(line));
const webPid = async () => (await call({ action: "services", name: "c2", op: "status" })).services[0].pid as number;

test("a suspended instance resumes with its processes and previews; without its memory it boots cold and says why; a daemon killed mid-suspend leaves the last checkpoint; destroy leaves nothing", async () => {
  // c2: resumed from the template by the test above, running since.
  const url = (await call({ action: "inspect", name: "c2" })).previews[0].url as string;
  const sleeper = (await exec("c2", "sleep 1000 > /dev/null 2>&1 & echo $!")).trim();
  await exec("c2", "echo kept > kept.txt");
  expect(sleeper).toMatch(/^\d+$/);
  const servicePid = await webPid();
  const diskDir = new StateLayout(sandbox.home).diskDir("instances", "c2");

  const suspended = await call({ action: "suspend", name: "c2" });
  expect(suspended).toMatchObject({ state: "suspended", previews: [] });
  await expect(fetch(url)).rejects.toThrow();
  expect(qemuFor(sandbox.home)).toEqual([]);
  await stat(join(diskDir, "memory.bin"));

  const agentLinesBefore = agentLines().length;
  const progress: string[] = [];
  const warm = await call(
    { action: "start", name: "c2" },
    { onProgress: (e) => progress.push(`[${e.stage}] ${e.message}`) },
  );
  expect(warm).toMatchObject({ state: "running", restore: { warm: true } });
  expect(progress).toContainEqual(expect.stringMatching(/^\[boot\] resumed from saved memory in \d+\.\d s/));
  expect(progress.some((p) => p.startsWith("[resume]"))).toBe(false);
  expect(warm.previews[0].url).toBe(url);
  expect(await fetchText(url)).toBe("200 Hello from the guest\n");
  expect(await exec("c2", `kill -0 ${sleeper} && echo alive`)).toBe("alive\n");
  expect(await webPid()).toBe(servicePid);
  // The resumed guest copies through its transfer disk (this boot's fresh drive file) as before.
  const driveReads = async () =>
    Number(
      (await exec("c2", `cat $(grep -l pisb-transfer /sys/block/*/serial | sed 's/serial$/stat/')`))
        .trim()
        .split(/\s+/)[2],
    );
  const [readBefore, data] = [await driveReads(), randomBytes(1024 * 1024)];
  await writeFile(join(sandbox.dir, "one.bin"), data);
  await call({ action: "upload", name: "c2", from: [join(sandbox.dir, "one.bin")], to: "one.bin" });
  expect(await exec("c2", "sha256sum < one.bin")).toBe(`${createHash("sha256").update(data).digest("hex")}  -\n`);
  expect((await driveReads()) - readBefore).toBeGreaterThanOrEqual(2048);
  await expect(stat(join(diskDir, "memory.bin"))).rejects.toMatchObject({ code: "ENOENT" });
  // The resumed agent was reached through the TCP door it gave before the suspend: no exec. (The
  // clone's own attach is logged before: this start's line is the one after it.)
  expect(agentLines().slice(agentLinesBefore)).toEqual([
    expect.stringMatching(/attached to the running agent \S+ \(pid \d+\) through its TCP door$/),
  ]);

  await call({ action: "suspend", name: "c2" });
  await rm(join(diskDir, "memory.bin"));
  const coldProgress: string[] = [];
  const cold = await call(
    { action: "start", name: "c2" },
    { onProgress: (e) => coldProgress.push(`[${e.stage}] ${e.message}`) },
  );
  const reason = "the memory file is missing";
  expect(cold).toMatchObject({ state: "running", restore: { warm: false, reason } });
  expect(coldProgress).toContainEqual(expect.stringContaining(reason));
  expect((await call({ action: "inspect", name: "c2" })).restore).toEqual({ warm: false, reason });
  expect(cold.previews[0].url).toBe(url);
  expect(await fetchText(url)).toBe("200 Hello from the guest\n");
  expect(await exec("c2", `kill -0 ${sleeper} 2>/dev/null && echo alive || echo gone`)).toBe("gone\n");
  // A cold boot's agent is a new one (the image's init started it): the old door is not tried.
  expect(agentLines().at(-1)).toMatch(/agent \S+ up \(started at boot, /);

  // SIGKILL of the daemon during a suspend: the instance reads interrupted, and start reopens the
  // newest state, cold: the run's disk as the kill left it, with what the guest synced before.
  expect(await exec("c2", "cat kept.txt")).toBe("kept\n");
  await exec("c2", "echo synced > kept.txt && sync");
  const daemonPid = (await call({ action: "inspect", name: "c2" })).daemonPid as number;
  const layout = new StateLayout(sandbox.home);
  const suspending = call({ action: "suspend", name: "c2" }).catch((e: unknown) => e);
  // Read from the status file (inspect samples QEMU's CPU for 200 ms): the suspend is under way.
  await until(
    "the suspend to begin",
    async () => (await readStatus(layout, "instances", "c2"))?.state === "suspending",
    30_000,
    10,
  );
  process.kill(daemonPid, "SIGKILL");
  expect(await suspending).toMatchObject({ code: expect.stringMatching(/^CONTROLLER_DAEMON_/) });
  // Its QEMU goes with it.
  expect(await qemuGone(sandbox.home, 15_000)).toEqual([]);
  // A killed process finishes exiting on its own time (a thread in the kernel, a busy disk).
  for (let i = 0; i < 600 && pidAlive(daemonPid); i++) await new Promise((r) => setTimeout(r, 100));
  expect((await call({ action: "inspect", name: "c2" })).state).toBe("interrupted");
  const reopened = await call({ action: "start", name: "c2" });
  expect(reopened.state).toBe("running");
  expect(reopened.restore?.warm).not.toBe(true);
  expect(reopened.recovery).toMatchObject({ outcome: "recovered" });
  expect(await exec("c2", "cat kept.txt")).toBe("synced\n");

  await call({ action: "suspend", name: "c2" });
  await stat(join(diskDir, "memory.bin"));
  expect(await call({ action: "destroy", name: "c2", confirm: "c2" })).toEqual({
    destroyed: "c2",
    kind: "instances",
  });
  await expect(stat(layout.entryDir("instances", "c2"))).rejects.toMatchObject({ code: "ENOENT" });
  expect(qemuFor(sandbox.home)).toEqual([]);
});
