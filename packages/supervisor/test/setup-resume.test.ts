// setup and resume through the real agent as a host process: commands and the hook in order, one
// deadline, every leftover process stopped (by environment marker, or by cgroup v2 scope).
import { access, chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { constants } from "node:fs";
import { join } from "node:path";
import { processAlive, startLocal, waitFor, type LocalSupervisor } from "./support/local.js";

async function readPids(file: string): Promise<number[]> {
  const text = await readFile(file, "utf8").catch(() => "");
  return text.split(/\s+/).filter(Boolean).map(Number);
}

async function cgroup2Writable(root: string): Promise<boolean> {
  try {
    await access(join(root, "cgroup.procs"), constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

describe("with the environment-marker sweep", () => {
  let sup: LocalSupervisor;
  beforeAll(async () => {
    sup = await startLocal({ agentArgs: ["--cgroup-root", "none"] });
  });
  afterAll(async () => {
    await sup?.close();
  });

  test("setup runs the commands, then the executable hook, and stops every leftover process", async () => {
    const pids = join(sup.root, "pids.txt");
    await mkdir(join(sup.workspace, ".agents"), { recursive: true });
    await writeFile(
      join(sup.workspace, ".agents", "setup"),
      `#!/bin/sh\necho hook-ran\n(sleep 1000 & echo $! >> ${pids})\n`,
    );
    await chmod(join(sup.workspace, ".agents", "setup"), 0o755);
    const result = await sup.client.runSetup({
      commands: [
        "echo first",
        // A detached, double-forked escapee in its own session, and one that ignores SIGTERM.
        `setsid nohup sleep 1000 >/dev/null 2>&1 & echo $! >> ${pids}`,
        `(trap '' TERM; exec setsid sleep 1001) >/dev/null 2>&1 & echo $! >> ${pids}`,
        // Waits for the middle shell (not its child), so the pid is on file before the sweep.
        `sh -c 'sleep 1002 & echo $! >> ${pids}' & wait $!`,
      ],
    });
    expect(result).toMatchObject({ ok: true, exitCode: 0, timedOut: false });
    expect(result.steps.map((s) => s.command)).toEqual([
      "echo first",
      expect.stringContaining("setsid nohup"),
      expect.stringContaining("trap"),
      expect.stringContaining("sleep 1002"),
      ".agents/setup",
    ]);
    expect(result.output).toContain("first\n");
    expect(result.output).toContain("hook-ran\n");
    expect(result.cleanup.method).toBe("environ");
    const leftovers = await readPids(pids);
    expect(leftovers).toHaveLength(4);
    expect(result.cleanup.stopped).toBeGreaterThanOrEqual(4);
    for (const pid of leftovers) expect(await processAlive(pid)).toBe(false);
    expect(await readFile(result.logPath, "utf8")).toContain("hook-ran");
  });

  test("a failing step ends setup, is reported, and later steps do not run", async () => {
    const result = await sup.client.runSetup({ commands: ["echo a", "exit 7", "echo never"] });
    expect(result).toMatchObject({ ok: false, exitCode: 7, timedOut: false });
    expect(result.steps.map((s) => s.exitCode)).toEqual([0, 7]);
    expect(result.output).not.toContain("never");
  });

  test("one deadline covers all of setup; leftovers are still stopped", async () => {
    const pids = join(sup.root, "deadline-pids.txt");
    const t0 = Date.now();
    const result = await sup.client.runSetup({
      commands: [`setsid sleep 1000 >/dev/null 2>&1 & echo $! >> ${pids}; sleep 0.5`, "sleep 30", "echo never"],
      deadlineMs: 1_500,
    });
    expect(Date.now() - t0).toBeLessThan(8_000);
    expect(result).toMatchObject({ ok: false, timedOut: true, exitCode: 124 });
    expect(result.steps).toHaveLength(2);
    for (const pid of await readPids(pids)) expect(await processAlive(pid)).toBe(false);
  });

  test("a non-executable hook is skipped with a note", async () => {
    await mkdir(join(sup.workspace, ".agents"), { recursive: true });
    await writeFile(join(sup.workspace, ".agents", "resume"), "#!/bin/sh\necho should-not-run\n");
    await chmod(join(sup.workspace, ".agents", "resume"), 0o644);
    const result = await sup.client.runResume({ commands: ["echo resumed"] });
    expect(result).toMatchObject({ running: false, exitCode: 0 });
    expect(result.output).toContain("resumed\n");
    expect(result.output).toContain("not executable");
    expect(result.output).not.toContain("should-not-run");
  });

  test("resume waits up to waitMs, then continues in the background behind a handle", async () => {
    await writeFile(join(sup.workspace, ".agents", "resume"), "#!/bin/sh\necho hook-start\nsleep 2\necho hook-end\n");
    await chmod(join(sup.workspace, ".agents", "resume"), 0o755);
    const t0 = Date.now();
    const result = await sup.client.runResume({ commands: ["echo cmd"], waitMs: 500 });
    const waited = Date.now() - t0;
    expect(waited).toBeGreaterThanOrEqual(450);
    expect(waited).toBeLessThan(2_000);
    expect(result.running).toBe(true);
    expect(result.output).toContain("cmd\n");
    const rest = await sup.client.execStatus(result.handle, { timeoutMs: 10_000 });
    expect(rest).toMatchObject({ running: false, exitCode: 0 });
    expect(rest.output).toContain("hook-end\n");
    expect(rest.output).not.toContain("cmd\n");
  });

  test("setup defaults to the guest YAML's commands", async () => {
    await sup.writeYaml("version: 1\nsetup:\n  - echo from-yaml\n");
    const result = await sup.client.runSetup();
    expect(result.output).toContain("from-yaml\n");
  });

  test("aborting setup cancels it in the guest", async () => {
    const pids = join(sup.root, "abort-pids.txt");
    const controller = new AbortController();
    const running = sup.client.runSetup({
      commands: [`echo $$ >> ${pids}; exec sleep 300`],
      signal: controller.signal,
    });
    const [pid] = await waitFor(async () => {
      const found = await readPids(pids);
      return found.length ? found : undefined;
    });
    controller.abort(new Error("user gave up"));
    await expect(running).rejects.toThrow("user gave up");
    await waitFor(async () => !(await processAlive(pid!)), 10_000, "setup step to stop");
  });
});

const unified = "/sys/fs/cgroup/unified";

describe("with a cgroup v2 scope", () => {
  let sup: LocalSupervisor | undefined;
  beforeAll(async () => {
    if (await cgroup2Writable(unified)) sup = await startLocal({ agentArgs: ["--cgroup-root", unified] });
  });
  afterAll(async () => {
    await sup?.close();
  });

  test("even a leftover that wipes its environment is stopped", async () => {
    if (!sup) {
      console.warn(`skipped: ${unified} is not a writable cgroup v2 mount on this host`);
      return;
    }
    expect(sup.client.hello.cleanup).toBe("cgroup+environ");
    const pids = join(sup.root, "cg-pids.txt");
    const result = await sup.client.runSetup({
      commands: [
        `env -i /usr/bin/setsid /bin/sleep 1000 >/dev/null 2>&1 & echo $! >> ${pids}`,
        `setsid nohup sleep 1000 >/dev/null 2>&1 & echo $! >> ${pids}`,
      ],
    });
    expect(result.ok).toBe(true);
    expect(result.cleanup.method).toBe("cgroup+environ");
    const leftovers = await readPids(pids);
    expect(leftovers).toHaveLength(2);
    for (const pid of leftovers) expect(await processAlive(pid)).toBe(false);
  });
});
