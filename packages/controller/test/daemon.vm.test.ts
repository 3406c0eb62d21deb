// The daemon outlives its client, survives a hostile guest, racing clients (real CLI processes
// and daemons that exit and are spawned again) leave one consistent instance, and a QEMU killed
// under it reads failed. One instance for the whole file. The same race for 10 rounds on the
// daemon's own logic: race.local.test.ts.
import { spawn } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { StateLayout, isControllerError } from "../src/client/index.js";
import { makeSandbox, qemuFor, qemuGone, teardown, type Sandbox } from "../src/testing.js";

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
/**
 * Rounds of the start/stop/exec race between real processes: one with stop first, one with start
 * first (each costs about one TCG boot). race.local.test.ts runs the 10 the issue asks for.
 */
const ROUNDS = Number(process.env.PI_SANDBOX_RACE_ROUNDS ?? 2);

let sandbox: Sandbox;
let call: Sandbox["call"];

beforeAll(async () => {
  sandbox = await makeSandbox("pst-");
  await sandbox.writeConfig("profile: tiny\ndiskGiB: 4\n");
  call = sandbox.call;
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

test("a create whose client is killed mid-boot finishes; another process then uses the instance", async () => {
  const child = spawn(process.execPath, [CLI, "create", "keep", "-c", "sandbox.yaml"], {
    cwd: sandbox.dir,
    env: sandbox.env,
    stdio: ["ignore", "ignore", "pipe"],
  });
  await new Promise<void>((resolve, reject) => {
    child.stderr.on("data", (chunk: Buffer) => {
      if (chunk.toString().includes("[boot]")) resolve();
    });
    child.once("exit", (code) => reject(new Error(`CLI exited early (${code})`)));
  });
  child.kill("SIGKILL");
  let view = await call({ action: "inspect", name: "keep" });
  const deadline = Date.now() + 300_000;
  while (view.state === "starting" && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 1000));
    view = await call({ action: "inspect", name: "keep" });
  }
  expect(view.state).toBe("running");
  const result = await call({ action: "exec", name: "keep", cmd: "echo still here" });
  expect(result.output).toBe("still here\n");
});

/** Bytes guest root writes into each pipe of the agent's bridge (see the flood test). */
const FLOOD_BYTES = 48 * 1024 * 1024;
/** The bound on the daemon's memory under a flood. */
const RSS_LIMIT = 400 * 1024 * 1024;
/** Growth of the daemon's peak RSS allowed: a daemon that kept a flood would grow by at least its size. */
const RSS_GROWTH_LIMIT = 32 * 1024 * 1024;

/** Peak RSS (VmHWM) of a live process in bytes, or undefined once it is gone. */
function peakRss(pid: number): number | undefined {
  try {
    const kib = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return kib ? Number(kib[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

test("guest root floods the agent bridge's stderr and reply pipe: the daemon stays small, the instance reads failed with AGENT_PROTOCOL, start works", async () => {
  // The supervisor's hostile-guest.vm.test.ts proves the client's bound with 128 MiB per pipe;
  // this is the same attack on a real daemon, through the product's own exec (guest root).
  const layout = new StateLayout(sandbox.home);
  /** Runs `cmd` in the guest to its end (exec-status returns only new output) and returns its output. */
  const guest = async (cmd: string): Promise<string> => {
    let result = await call({ action: "exec", name: "keep", cmd, timeoutMs: 60_000 });
    let output = String(result.output);
    while (result.running) {
      result = await call({ action: "exec-status", name: "keep", pid: result.pid, timeoutMs: 60_000 });
      output += String(result.output);
    }
    expect(result.exitCode).toBe(0);
    return output;
  };
  const daemonPid = (await call({ action: "inspect", name: "keep" })).daemonPid as number;
  expect(daemonPid).toBeGreaterThan(0);
  // The bridge is the exec the daemon talks to ("--[a]ttach" does not match this script itself).
  // The redirect's own error (a process that ended during the loop) is the shell's: braces catch it.
  const bridge = (
    await guest(
      "for p in /proc/[0-9]*; do { tr '\\0' ' ' < $p/cmdline; } 2>/dev/null | grep -q -- '--[a]ttach' && echo ${p#/proc/}; done; true",
    )
  ).trim();
  expect(bridge).toMatch(/^\d+$/);
  // Its reply pipe: the one write-only pipe it holds other than stderr.
  const replyFd = (
    await guest(
      [
        `pid=${bridge}; err=$(readlink /proc/$pid/fd/2); for f in /proc/$pid/fd/*; do n=\${f##*/}; t=$(readlink "$f") || continue`,
        'case "$t" in pipe:*) ;; *) continue ;; esac; [ "$t" = "$err" ] && continue',
        'flags=$(sed -n "s/^flags:[[:space:]]*//p" /proc/$pid/fdinfo/$n); [ $(( 0$flags & 3 )) -eq 1 ] && echo $n; done; true',
      ].join("\n"),
    )
  ).trim();
  expect(replyFd).toMatch(/^\d+$/);
  const flood = (fd: string) => `head -c ${FLOOD_BYTES} /dev/zero | tr '\\0' x > /proc/${bridge}/fd/${fd}`;
  const before = peakRss(daemonPid)!;
  const logBytes = () => statSync(layout.logFile("instances", "keep")).size;
  const logBefore = logBytes();

  // stderr: kept to its tail and logged within a budget; the instance keeps working.
  expect(await guest(`${flood("2")}; echo "exit $?"`)).toBe("exit 0\n");
  expect((await call({ action: "exec", name: "keep", cmd: "echo still here" })).output).toBe("still here\n");
  const afterStderr = peakRss(daemonPid)!;
  expect(logBytes() - logBefore).toBeLessThan(256 * 1024);

  // The reply pipe: the first line passes the host's bound, the daemon cuts the channel,
  // checkpoints the disk, reads failed with the reason, and exits.
  await guest(`setsid sh -c '${flood(replyFd)}' </dev/null >/dev/null 2>&1 & echo started`);
  let peak = afterStderr;
  let view = await call({ action: "inspect", name: "keep" });
  const deadline = Date.now() + 240_000;
  while ((view.state !== "failed" || view.daemonPid !== undefined) && Date.now() < deadline) {
    peak = Math.max(peak, peakRss(daemonPid) ?? 0);
    await new Promise((r) => setTimeout(r, 100));
    view = await call({ action: "inspect", name: "keep" });
  }
  process.stderr.write(
    `hostile guest: daemon peak RSS ${Math.round(before / 2 ** 20)} MiB before, ${Math.round(afterStderr / 2 ** 20)} after the stderr flood, ${Math.round(peak / 2 ** 20)} at the end\n`,
  );
  expect(view.state).toBe("failed");
  expect(view.errors).toEqual([
    expect.objectContaining({
      code: "AGENT_PROTOCOL",
      message: expect.stringMatching(/^the guest agent of keep is gone: .*a line longer than \d+ bytes/),
      hint: expect.stringMatching(/"action":"start"/),
    }),
  ]);
  expect(view.daemonPid).toBeUndefined();
  // Bounded: neither flood was kept (each would add at least its size), and under the limit.
  expect(afterStderr - before).toBeLessThan(RSS_GROWTH_LIMIT);
  expect(peak - before).toBeLessThan(RSS_GROWTH_LIMIT);
  expect(peak).toBeLessThan(RSS_LIMIT);

  const started = await call({ action: "start", name: "keep" });
  expect(started.state).toBe("running");
  expect((await call({ action: "exec", name: "keep", cmd: "echo fresh" })).output).toBe("fresh\n");
});

test(`two clients racing start/stop/exec for ${ROUNDS} rounds end consistent`, async () => {
  const tolerated = new Set(["CONTROLLER_NOT_RUNNING", "CONTROLLER_DAEMON_LOST", "CONTROLLER_DAEMON_EXITING"]);
  const attempt = async (action: Record<string, unknown>) => {
    try {
      return await call(action);
    } catch (error) {
      if (isControllerError(error) && tolerated.has(error.code)) return undefined;
      throw error;
    }
  };
  for (let round = 0; round < ROUNDS; round++) {
    await Promise.all([
      attempt({ action: round % 2 === 0 ? "stop" : "start", name: "keep" }),
      attempt({ action: round % 2 === 0 ? "start" : "stop", name: "keep" }),
      attempt({ action: "exec", name: "keep", cmd: "true" }),
    ]);
    const view = await call({ action: "inspect", name: "keep" });
    expect(["running", "stopped"]).toContain(view.state);
    if (view.state === "running") {
      expect((await call({ action: "exec", name: "keep", cmd: "echo ok" })).output).toBe("ok\n");
    } else {
      expect(await qemuGone(sandbox.dir, 5000)).toEqual([]);
    }
  }
});

test("a QEMU killed behind the daemon's back reads failed with the reason, and the daemon exits", async () => {
  const started = await call({ action: "start", name: "keep" });
  expect(started.state).toBe("running");
  const [qemu] = qemuFor(`${sandbox.dir}/state/instances/keep/`);
  expect(qemu).toBeDefined();
  process.kill(qemu!, "SIGKILL");
  let view = await call({ action: "inspect", name: "keep" });
  for (let i = 0; i < 100 && view.state === "running"; i++) {
    await new Promise((r) => setTimeout(r, 100));
    view = await call({ action: "inspect", name: "keep" });
  }
  expect(view.state).toBe("failed");
  expect(view.errors).toEqual([expect.objectContaining({ code: "CONTROLLER_VM_EXITED" })]);
  for (let i = 0; i < 50 && view.daemonPid !== undefined; i++) {
    await new Promise((r) => setTimeout(r, 100));
    view = await call({ action: "inspect", name: "keep" });
  }
  expect(view.daemonPid).toBeUndefined();
  await expect(call({ action: "exec", name: "keep", cmd: "true" })).rejects.toMatchObject({
    code: "CONTROLLER_NOT_RUNNING",
  });
  await call({ action: "destroy", name: "keep", confirm: "keep" });
});
