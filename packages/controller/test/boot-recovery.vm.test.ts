// Booting on any Linux host, and creates that can be retried, on real VMs through the client. The
// retried create is also the one that boots where /dev/kvm cannot run the guest kernel.
import { chmod, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { daemonLive, pidAlive } from "../src/state/liveness.js";
import { StateLayout } from "../src/state/layout.js";
import { fetchText, makeSandbox, SEED_YAML, qemuFor, sleep, teardown, until, type Sandbox } from "../src/testing.js";

let sandbox: Sandbox;

beforeAll(async () => {
  sandbox = await makeSandbox("pbr-");
  await sandbox.writeConfig(SEED_YAML);
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

function kill(pid: number): void {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // already gone
  }
}

/**
 * Starts a create of `name` and resolves once its QEMU runs. A create that ends before any QEMU
 * started failed for another reason, which this throws.
 */
async function createUntilQemu(name: string): Promise<{ creating: Promise<unknown>; settled: () => boolean }> {
  let ended = false;
  const creating = sandbox.call({ action: "create", name, config: "sandbox.yaml" });
  creating.then(
    () => (ended = true),
    () => (ended = true),
  );
  await until("QEMU of the create", () => ended || qemuFor(sandbox.home).length > 0);
  if (ended) await creating;
  return { creating, settled: () => ended };
}

test("a create that fails before its first boot finished leaves nothing", async () => {
  // QEMU is killed while the guest boots: the create fails for real, below the controller.
  const layout = new StateLayout(sandbox.home);
  const { creating, settled } = await createUntilQemu("retry");
  // Every QEMU it starts is killed (a host whose KVM passed the probe retries once on TCG).
  while (!settled()) {
    for (const pid of qemuFor(sandbox.home)) kill(pid);
    await sleep(100);
  }
  const error = await creating.then(
    () => undefined,
    (e: unknown) => e as { code: string; hint: string; details: { logFile: string; logTail: string } },
  );
  expect(error?.code).toMatch(/^VM_/);
  expect(error?.hint).toMatch(/Nothing of retry was kept: fix the cause and run create again/);
  expect(error?.details.logFile).toBe(layout.failedCreateLogFile("retry"));
  expect(error?.details.logTail).toContain("create failed, removing retry");
  expect(await readFile(error!.details.logFile, "utf8")).toContain("[vm]");
  await expect(sandbox.call({ action: "inspect", name: "retry" })).rejects.toMatchObject({
    code: "CONTROLLER_NOT_FOUND",
  });
  await expect(stat(layout.entryDir("instances", "retry"))).rejects.toMatchObject({ code: "ENOENT" });
});

test("the failed create run again works; on a /dev/kvm that cannot run the guest kernel (nested PVM) it gives a TCG instance that says why", async () => {
  // The retry's boot is also the nested-PVM check (one create for both): the probe's QEMU plays a
  // nested-PVM host: it starts, prints the real-mode stub's line, and then nothing. The boot
  // itself runs the real QEMU.
  const fake = join(sandbox.dir, "qemu-pvm");
  await writeFile(fake, "#!/bin/sh\nprintf 'Probing EDD (edd=off to disable)... ok\\r\\n'\nexec sleep 60\n");
  await chmod(fake, 0o755);
  const env: NodeJS.ProcessEnv = { ...sandbox.env, PI_SANDBOX_TEST_KVM_PROBE_QEMU: fake };
  delete env.PI_SANDBOX_ACCEL;
  const progress: string[] = [];
  const again = await sandbox.call(
    { action: "create", name: "retry", config: "sandbox.yaml" },
    { env, onProgress: (e) => progress.push(e.message) },
  );
  expect(again.state).toBe("running");
  expect(await fetchText(again.previews[0].url)).toBe("200 Hello from the guest\n");
  expect(again.accelerator).toBe("tcg");
  expect(again.acceleratorReason).toMatch(
    /^\/dev\/kvm is present but could not run a Linux kernel \(the guest kernel printed nothing within 8 s \(its boot stopped after "Probing EDD/,
  );
  expect(progress).toEqual(expect.arrayContaining(["checking that KVM can run the guest kernel"]));
  expect(progress.join("\n")).toMatch(/could not run a Linux kernel.*software emulation \(TCG\)/);
  const inspected = await sandbox.call({ action: "inspect", name: "retry" });
  expect(inspected).toMatchObject({ accelerator: "tcg", acceleratorReason: again.acceleratorReason });
  await sandbox.call({ action: "destroy", name: "retry", confirm: "retry" });
});

test("a create whose daemon died mid-way is finished by start, setup included", async () => {
  const layout = new StateLayout(sandbox.home);
  // Kill the daemon once the guest boots: before setup wrote the page.
  const { creating } = await createUntilQemu("halfway");
  const live = await daemonLive(layout.pidFile("instances", "halfway"), layout.socketPath("instances", "halfway"));
  expect(live.pid).toBeDefined();
  process.kill(live.pid!, "SIGKILL");
  await expect(creating).rejects.toBeDefined();
  await until("QEMU to die with its daemon", () => qemuFor(sandbox.home).length === 0, 30_000);
  // A killed process finishes exiting on its own time (a thread in the kernel, a busy disk).
  await until("the killed daemon to exit", () => !pidAlive(live.pid!), 60_000);

  const view = await sandbox.call({ action: "inspect", name: "halfway" });
  expect(view.state).toBe("interrupted");
  await expect(sandbox.call({ action: "create", name: "halfway", config: "sandbox.yaml" })).rejects.toMatchObject({
    code: "CONTROLLER_ALREADY_EXISTS",
    hint: expect.stringMatching(/start runs the rest of the create, setup included/),
  });
  const progress: string[] = [];
  const started = await sandbox.call(
    { action: "start", name: "halfway" },
    { onProgress: (e) => progress.push(`[${e.stage}] ${e.message}`) },
  );
  expect(progress).toEqual(expect.arrayContaining(["[boot] finishing the interrupted create of halfway"]));
  expect(progress.join("\n")).toMatch(/\[setup\] setup done/);
  expect(started.state).toBe("running");
  expect(started.setup).toMatchObject({ exitCode: 0 });
  expect(await fetchText(started.previews[0].url)).toBe("200 Hello from the guest\n");
  const guestConfig = await sandbox.call({ action: "read", name: "halfway", path: "/workspace/.sandbox.yaml" });
  expect(guestConfig.content).toContain("python3 -m http.server");

  // The create is complete now: a stop and start runs no setup again.
  await sandbox.call({ action: "exec", name: "halfway", cmd: "rm /workspace/index.html" });
  await sandbox.call({ action: "stop", name: "halfway" });
  const progress2: string[] = [];
  await sandbox.call({ action: "start", name: "halfway" }, { onProgress: (e) => progress2.push(e.stage) });
  expect(progress2).not.toContain("setup");
  await sandbox.call({ action: "destroy", name: "halfway", confirm: "halfway" });
});
