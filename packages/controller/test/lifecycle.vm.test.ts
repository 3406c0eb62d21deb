// The seed README walkthrough on a real VM through the client API, as a user would drive it. (A
// daemon killed during a suspend: suspend.vm.test.ts.)
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ControllerError, StateLayout } from "../src/client/index.js";
import { fetchText, makeSandbox, SEED_YAML, qemuFor, qemuGone, teardown, until, type Sandbox } from "../src/testing.js";

let sandbox: Sandbox;
let call: Sandbox["call"];

beforeAll(async () => {
  sandbox = await makeSandbox("pst-");
  await sandbox.writeConfig(SEED_YAML);
  call = sandbox.call;
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

test("create → preview → exec → files → stop → start keeps the URL and the files", async () => {
  const stages: string[] = [];
  const messages: string[] = [];
  const created = await call(
    { action: "create", name: "demo", config: "sandbox.yaml" },
    {
      onProgress: (e) => {
        stages.push(e.stage);
        messages.push(`[${e.stage}] ${e.message}`);
      },
    },
  );
  expect(created.state).toBe("running");
  expect(stages).toEqual(expect.arrayContaining(["disk", "boot", "setup", "services", "done"]));
  // Setup shows each command as it runs (the agent's setup log, followed by the daemon).
  expect(messages).toContainEqual(
    expect.stringMatching(/^\[setup\] \$ printf 'Hello from the guest.*index\.html \(1\/1\)$/),
  );
  const url = created.previews[0].url as string;
  // The instance's own loopback address (its own cookie jar in browsers), not the shared 127.0.0.1.
  expect(url).toMatch(/^http:\/\/127(?:\.\d{1,3}){3}:\d+\/$/);
  expect(new URL(url).hostname).not.toBe("127.0.0.1");
  expect(await fetchText(url)).toBe("200 Hello from the guest\n");

  const quick = await call({ action: "exec", name: "demo", cmd: "echo $((6*7)); pwd" });
  expect(quick).toMatchObject({ running: false, exitCode: 0 });
  expect(quick.output).toBe("42\n/workspace\n");

  const slow = await call({ action: "exec", name: "demo", cmd: "sleep 2; echo later", timeoutMs: 100 });
  expect(slow.running).toBe(true);
  expect(typeof slow.pid).toBe("string");
  const followed = await call({ action: "exec-status", name: "demo", pid: slow.pid, timeoutMs: 20_000 });
  expect(followed).toMatchObject({ running: false, exitCode: 0, output: "later\n" });

  await call({ action: "write", name: "demo", path: "/workspace/note.txt", content: "kept across stop\n" });
  expect((await call({ action: "read", name: "demo", path: "/workspace/note.txt" })).content).toBe(
    "kept across stop\n",
  );

  const stopped = await call({ action: "stop", name: "demo" });
  expect(stopped.state).toBe("stopped");
  await expect(fetch(url)).rejects.toThrow();

  const started = await call({ action: "start", name: "demo" });
  expect(started.state).toBe("running");
  expect(started.previews[0].url).toBe(url);
  expect(await fetchText(url)).toBe("200 Hello from the guest\n");
  // Both boots' agents were started by the image's init under the key of the agent this host
  // wants (its log says so): the first from the seed the host shared with the new disk, this one
  // from the script the agent left on the disk. The host came in through the door each one left,
  // without an exec bridge.
  const layout = new StateLayout(sandbox.home);
  const agentUps = readFileSync(layout.logFile("instances", "demo"), "utf8")
    .split("\n")
    .filter((line) => / agent \S+ up \(/.test(line));
  expect(agentUps).toHaveLength(2);
  expect(agentUps[0]).toContain("(started at boot, through its TCP door, python 3.");
  expect(agentUps[1]).toContain("(started at boot, through its TCP door, python 3.");
  const [seed, ...others] = readdirSync(layout.agentSeedsDir());
  expect(others).toEqual([]);
  expect(readdirSync(join(layout.agentSeedsDir(), seed!)).sort()).toEqual(["first-boot", "sandbox_agent.pyz"]);
  expect((await call({ action: "read", name: "demo", path: "/workspace/note.txt" })).content).toBe(
    "kept across stop\n",
  );

  await expect(call({ action: "create", name: "demo", config: "sandbox.yaml" })).rejects.toMatchObject({
    code: "CONTROLLER_ALREADY_EXISTS",
  });
});

test("a SIGKILLed daemon reads interrupted at once, leaves no QEMU, and start recovers what the guest synced", async () => {
  const synced = await call({ action: "exec", name: "demo", cmd: "echo work > /workspace/w.txt && sync" });
  expect(synced.exitCode).toBe(0);
  const before = await call({ action: "inspect", name: "demo" });
  expect(before.state).toBe("running");
  // What the QEMU holds, and where: the guest's RAM, TCG's translation cache (none under KVM), QEMU.
  const { rssBytes, memory } = before.usage;
  expect(memory.guestBytes).toBeGreaterThan(64 * 2 ** 20);
  expect(memory.translationCacheBytes > 0).toBe(before.accelerator === "tcg");
  expect(memory.otherBytes).toBeGreaterThan(0);
  const parts = memory.guestBytes + memory.translationCacheBytes + memory.otherBytes;
  expect(Math.abs(parts - rssBytes)).toBeLessThan(rssBytes * 0.1);
  process.kill(before.daemonPid, "SIGKILL");
  const t0 = Date.now();
  let view = await call({ action: "inspect", name: "demo" });
  while (view.state !== "interrupted" && Date.now() - t0 < 1000) view = await call({ action: "inspect", name: "demo" });
  expect(view.state).toBe("interrupted");
  expect(view.hint).toMatch(/start/);
  expect(await qemuGone(sandbox.dir, 5000)).toEqual([]);
  const progress: string[] = [];
  const started = await call(
    { action: "start", name: "demo" },
    { onProgress: (e) => progress.push(`[${e.stage}] ${e.message}`) },
  );
  expect(started.state).toBe("running");
  expect(started.recovery).toMatchObject({ outcome: "recovered" });
  expect(progress.join("\n")).toMatch(/\[boot\] recovered the disk as of /);
  expect((await call({ action: "read", name: "demo", path: "/workspace/note.txt" })).content).toBe(
    "kept across stop\n",
  );
  // Written and synced after the last stop, before the kill: kept.
  expect((await call({ action: "read", name: "demo", path: "/workspace/w.txt" })).content).toBe("work\n");
});

test("QEMU killed alone: the instance reads failed with the reason, its daemon exits, and start recovers what the guest synced", async () => {
  await call({ action: "exec", name: "demo", cmd: "echo qemu > /workspace/q.txt && sync" });
  const [qemu] = qemuFor(sandbox.dir);
  expect(qemu).toBeDefined();
  process.kill(qemu!, "SIGKILL");
  await until(
    "the instance to read failed",
    async () => (await call({ action: "inspect", name: "demo" })).state === "failed",
    30_000,
  );
  let view = await call({ action: "inspect", name: "demo" });
  expect(view.errors).toEqual([expect.objectContaining({ code: "CONTROLLER_VM_EXITED" })]);
  // The daemon, with nothing left to run, exits; an action that needs the guest says it is not running.
  for (let i = 0; i < 50 && view.daemonPid !== undefined; i++) {
    await new Promise((r) => setTimeout(r, 100));
    view = await call({ action: "inspect", name: "demo" });
  }
  expect(view.daemonPid).toBeUndefined();
  await expect(call({ action: "exec", name: "demo", cmd: "true" })).rejects.toMatchObject({
    code: "CONTROLLER_NOT_RUNNING",
  });
  const started = await call({ action: "start", name: "demo" });
  expect(started.recovery).toMatchObject({ outcome: "recovered" });
  expect((await call({ action: "read", name: "demo", path: "/workspace/q.txt" })).content).toBe("qemu\n");
  await call({ action: "stop", name: "demo" });
});

test("templates: prepare, two independent instances; one still starts from its disk once the template is destroyed", async () => {
  // Prepared with suspend, so the two creates resume its saved guest instead of booting two
  // kernels: what this test proves is the two instances' independence and the instance outliving
  // its template (its cold start below). A cold create from a template: e2e's cli-walkthrough and
  // pi-extension's pi.vm test; warm clones' own identities: suspend.vm.test.ts.
  const prepared = await call({ action: "prepare", name: "web-base", config: "sandbox.yaml", suspend: true });
  expect(prepared.state).toBe("prepared");
  const templates = await call({ action: "list", kind: "templates" });
  expect(templates.templates.map((t: { name: string }) => t.name)).toEqual(["web-base"]);

  const one = await call({ action: "create", name: "review-one", template: "web-base" });
  const two = await call({ action: "create", name: "review-two", template: "web-base" });
  expect([one.restore?.warm, two.restore?.warm]).toEqual([true, true]);
  expect(await fetchText(one.previews[0].url)).toBe("200 Hello from the guest\n");
  expect(one.previews[0].url).not.toBe(two.previews[0].url);
  await call({ action: "write", name: "review-one", path: "/workspace/index.html", content: "one\n" });
  expect(await fetchText(one.previews[0].url)).toBe("200 one\n");
  expect(await fetchText(two.previews[0].url)).toBe("200 Hello from the guest\n");
  await call({ action: "stop", name: "review-one" });
  await call({ action: "stop", name: "review-two" });

  await expect(call({ action: "destroy", name: "web-base", kind: "templates", confirm: "nope" })).rejects.toMatchObject(
    {
      code: "CONTROLLER_CONFIRM_MISMATCH",
    },
  );
  await call({ action: "destroy", name: "web-base", kind: "templates", confirm: "web-base" });
  expect((await call({ action: "list", kind: "templates" })).templates).toEqual([]);

  // review-two's disk reads the template's files (its page, its .sandbox.yaml) with the template
  // and its saved memory gone, in a cold boot; review-one's disk is built the same way (an
  // instance's own writes across a stop and start: the first test).
  const reopenedTwo = await call({ action: "start", name: "review-two" });
  expect(reopenedTwo.lastStart).toMatchObject({ warm: false });
  expect(await fetchText(reopenedTwo.previews[0].url)).toBe("200 Hello from the guest\n");
  await call({ action: "stop", name: "review-two" });
});

test("destroy refuses a wrong confirm, then removes everything", async () => {
  const wrong = call({ action: "destroy", name: "review-two", confirm: "review-one" });
  await expect(wrong).rejects.toBeInstanceOf(ControllerError);
  await expect(call({ action: "inspect", name: "review-two" })).resolves.toMatchObject({ state: "stopped" });
  for (const name of ["demo", "review-one", "review-two"]) {
    await expect(call({ action: "destroy", name, confirm: name })).resolves.toMatchObject({ destroyed: name });
  }
  expect((await call({ action: "list" })).instances).toEqual([]);
  expect(qemuFor(sandbox.dir)).toEqual([]);
});
