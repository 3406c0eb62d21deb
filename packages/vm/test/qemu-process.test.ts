// QEMU process hygiene: the launcher wrapper dies with its owner and runs QEMU under seccomp,
// no_new_privs and umask 077, QMP reports a paused or failed guest, and stray QEMUs are reaped.
import { execFileSync, spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import fsp from "node:fs/promises";
import net from "node:net";
import path from "node:path";
import { QEMU_PID_FILE, prepareQemuLauncher, reapStrayQemu } from "../src/index.js";
import { QmpMonitor } from "../src/host/qmp.js";
import { createTransferDisk, machineHasTransferDisk } from "../src/host/transfer-disk.js";
import { TS_NODE_ARGS, qemuWithoutSeccomp, tempDir } from "./support/helpers.js";

let dir: string;
let cleanup: () => Promise<void>;
const started: number[] = [];

beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(async () => {
  for (const pid of started.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  await cleanup();
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // A zombie is dead for our purposes.
  return !fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.startsWith("Z");
}

async function eventually(check: () => boolean, timeoutMs = 5000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return check();
}

/** Arguments that keep a QEMU up, doing nothing, with `tag` in its command line. */
function idleQemuArgs(tag: string): string[] {
  return ["-machine", "none", "-nodefaults", "-display", "none", "-monitor", "none", "-S", "-name", tag];
}

test("the launcher is a pdeathsig wrapper whose name keeps the arch", async () => {
  const launcher = await prepareQemuLauncher(path.join(dir, "bin"));
  expect(launcher.diesWithParent).toBe(true);
  expect(path.basename(launcher.qemuPath)).toBe("qemu-system-x86_64-pdeathsig");
  expect(fs.readFileSync(launcher.qemuPath, "utf8")).toContain("--pdeathsig KILL");
  expect(launcher.devices).toBe("balloon(free-page-reporting),transfer-disk(64MiB)");
  expect(execFileSync(launcher.qemuPath, ["--version"], { encoding: "utf8" })).toMatch(/QEMU emulator version/);
  // Regenerating leaves an identical file alone.
  const before = fs.statSync(launcher.qemuPath).mtimeMs;
  await prepareQemuLauncher(path.join(dir, "bin"));
  expect(fs.statSync(launcher.qemuPath).mtimeMs).toBe(before);
});

test("the launcher gives QEMU a QMP socket next to Gondolin's control socket, which QmpMonitor speaks", async () => {
  const launcher = await prepareQemuLauncher(path.join(dir, "bin"));
  const runtime = path.join(dir, "run");
  await fsp.mkdir(runtime);
  // Gondolin's control chardev connects out (server=off); a listening one is enough to test the wrapper.
  const chardev = `socket,id=virtiocon0,path=${runtime}/ctl.sock,server=on,wait=off`;
  const qemu = spawn(launcher.qemuPath, [...idleQemuArgs(`${dir}/qmp`), "-chardev", chardev], { stdio: "ignore" });
  await new Promise((resolve) => qemu.once("spawn", resolve));
  started.push(qemu.pid!);
  const pauses: unknown[] = [];
  const monitor = new QmpMonitor(path.join(runtime, "qmp.sock"), {
    onIoErrorPause: (pause) => pauses.push(pause),
    connectTimeoutMs: 10_000,
  });
  try {
    await expect(monitor.connected).resolves.toBe(true);
    // -S: QEMU waits before running the (absent) guest.
    await expect(monitor.status()).resolves.toBe("prelaunch");
    await expect(monitor.command("no-such-command")).rejects.toThrow(/CommandNotFound/);
    expect(pauses).toEqual([]);
  } finally {
    monitor.close();
  }
  await expect(monitor.status()).rejects.toThrow(/not connected/);
});

test("the transfer disk: a fresh 0600 sparse file per boot, which the wrapper gives every machine type Gondolin uses, apart from the root drive", async () => {
  const launcher = await prepareQemuLauncher(path.join(dir, "bin"));
  const runtime = path.join(dir, "run");
  await fsp.mkdir(runtime);
  // A link left where the file goes is replaced, never written through.
  const elsewhere = path.join(dir, "elsewhere");
  fs.writeFileSync(elsewhere, "keep");
  fs.symlinkSync(elsewhere, path.join(runtime, "transfer.raw"));
  const disk = await createTransferDisk(runtime);
  expect(disk).toEqual({
    path: path.join(runtime, "transfer.raw"),
    sizeBytes: 64 * 1024 * 1024,
    serial: "pisb-transfer",
  });
  expect(fs.readFileSync(elsewhere, "utf8")).toBe("keep");
  const stat = fs.lstatSync(disk.path);
  expect([stat.isFile(), stat.mode & 0o777, stat.size, stat.nlink]).toEqual([true, 0o600, 64 * 1024 * 1024, 1]);
  expect(stat.blocks).toBe(0);
  expect(["q35", "pc", "virt", "microvm", "none"].map(machineHasTransferDisk)).toEqual([true, true, true, true, false]);
  const blockDevices = async (machine: string): Promise<{ device?: string; inserted?: { file?: string } }[]> => {
    const chardev = `socket,id=virtiocon0,path=${runtime}/ctl.sock,server=on,wait=off`;
    const args = ["-machine", machine, "-nodefaults", "-display", "none", "-monitor", "none", "-S"];
    const qemu = spawn(launcher.qemuPath, [...args, "-name", `${dir}/xfer`, "-chardev", chardev], { stdio: "ignore" });
    await new Promise((resolve) => qemu.once("spawn", resolve));
    started.push(qemu.pid!);
    const monitor = new QmpMonitor(path.join(runtime, "qmp.sock"), {
      onIoErrorPause: () => {},
      connectTimeoutMs: 10_000,
    });
    try {
      await expect(monitor.connected).resolves.toBe(true);
      return (await monitor.command("query-block")) as { device?: string; inserted?: { file?: string } }[];
    } finally {
      monitor.close();
      qemu.kill("SIGKILL");
      await new Promise((resolve) => qemu.once("exit", resolve));
      fs.rmSync(path.join(runtime, "qmp.sock"), { force: true });
    }
  };
  // q35: the drive, by its own id, never Gondolin's root drive id (drive0), which QMP's layer switch names.
  const q35 = await blockDevices("q35");
  expect(q35.map((device) => device.device)).toEqual(["pisb-transfer"]);
  expect(q35[0]!.inserted?.file).toBe("transfer.raw");
  // microvm (Linux hosts with KVM): the same drive, on virtio-mmio.
  const microvm = await blockDevices("microvm");
  expect(microvm.map((device) => [device.device, device.inserted?.file])).toEqual([["pisb-transfer", "transfer.raw"]]);
  // A machine type the wrapper does not know (here: none), or no file: no drive.
  expect((await blockDevices("none")).map((device) => device.device)).toEqual([]);
  fs.rmSync(disk.path);
  expect((await blockDevices("q35")).map((device) => device.device)).toEqual([]);
}, 60_000);

test("QmpMonitor reports a guest paused on a disk error, also one that paused before it connected", async () => {
  const socketPath = path.join(dir, "fake-qmp.sock");
  let status = "io-error";
  const sockets = new Set<net.Socket>();
  // A scripted QMP server: greeting, answers by id, and a BLOCK_IO_ERROR event on demand.
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.write(JSON.stringify({ QMP: { version: {}, capabilities: [] } }) + "\r\n");
    let buffer = "";
    socket.on("data", (chunk) => {
      buffer += String(chunk);
      for (let i = buffer.indexOf("\n"); i !== -1; i = buffer.indexOf("\n")) {
        const request = JSON.parse(buffer.slice(0, i)) as { execute: string; id: string };
        buffer = buffer.slice(i + 1);
        const answer = request.execute === "query-status" ? { status, running: status === "running" } : {};
        socket.write(JSON.stringify({ return: answer, id: request.id }) + "\r\n");
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  const pauses: unknown[] = [];
  const monitor = new QmpMonitor(socketPath, { onIoErrorPause: (pause) => pauses.push(pause) });
  try {
    await expect(monitor.connected).resolves.toBe(true);
    // Paused before we connected: no event reached us, query-status tells.
    expect(pauses).toEqual([{ nospace: undefined, reason: undefined, operation: undefined, device: undefined }]);
    status = "running";
    const event = {
      event: "BLOCK_IO_ERROR",
      data: { device: "drive0", operation: "write", action: "stop", nospace: true, reason: "No space left on device" },
    };
    for (const socket of sockets) socket.write(JSON.stringify(event) + "\r\n");
    // An error the guest is told about (action report) pauses nothing.
    const reported = { event: "BLOCK_IO_ERROR", data: { ...event.data, action: "report", nospace: false } };
    for (const socket of sockets) socket.write(JSON.stringify(reported) + "\r\n");
    await eventually(() => pauses.length === 2);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(pauses).toEqual([
      expect.anything(),
      { nospace: true, reason: "No space left on device", operation: "write", device: "drive0" },
    ]);
  } finally {
    monitor.close();
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  }
});

test("QmpMonitor reports a KVM internal error (a STOP whose run state is internal-error), not a plain pause", async () => {
  // QEMU stops the guest on a KVM internal error with only a STOP event; the run state tells why.
  // This is what turns such a KVM boot into VM_KVM_FAILED, which startVm retries on TCG.
  const socketPath = path.join(dir, "fake-qmp-kvm.sock");
  let status = "running";
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.write(JSON.stringify({ QMP: { version: {}, capabilities: [] } }) + "\r\n");
    let buffer = "";
    socket.on("data", (chunk) => {
      buffer += String(chunk);
      for (let i = buffer.indexOf("\n"); i !== -1; i = buffer.indexOf("\n")) {
        const request = JSON.parse(buffer.slice(0, i)) as { execute: string; id: string };
        buffer = buffer.slice(i + 1);
        const answer = request.execute === "query-status" ? { status, running: status === "running" } : {};
        socket.write(JSON.stringify({ return: answer, id: request.id }) + "\r\n");
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  let internalErrors = 0;
  const pauses: unknown[] = [];
  const monitor = new QmpMonitor(socketPath, {
    onIoErrorPause: (pause) => pauses.push(pause),
    onInternalError: () => internalErrors++,
  });
  const stop = () => {
    for (const socket of sockets) socket.write(JSON.stringify({ event: "STOP", data: {} }) + "\r\n");
  };
  try {
    await expect(monitor.connected).resolves.toBe(true);
    status = "paused"; // a pause asked for (stop, a checkpoint) is no KVM problem
    stop();
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(internalErrors).toBe(0);
    status = "internal-error";
    stop();
    expect(await eventually(() => internalErrors === 1)).toBe(true);
    expect(pauses).toEqual([]);
  } finally {
    monitor.close();
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  }
  // A guest already stopped on the error when the monitor connects is reported too.
  const again = new QmpMonitor(socketPath, {
    onIoErrorPause: () => undefined,
    onInternalError: () => internalErrors++,
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  try {
    await expect(again.connected).resolves.toBe(true);
    expect(internalErrors).toBe(2);
  } finally {
    again.close();
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  }
});

/** Feeds QMP commands to `qemu` on stdin (then quit) and resolves with how it exited. */
function runQmp(
  qemu: string,
  commands: object[],
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }> {
  const args = ["-machine", "none", "-nodefaults", "-display", "none", "-S", "-qmp", "stdio"];
  const child = spawn(qemu, args, { stdio: ["pipe", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => (stderr += String(d)));
  child.stdin.on("error", () => undefined);
  for (const command of [{ execute: "qmp_capabilities" }, ...commands])
    child.stdin.write(JSON.stringify(command) + "\n");
  // The quit comes later, so that a command that works has the time to do its work first.
  const quit = setTimeout(() => child.stdin.end(JSON.stringify({ execute: "quit" }) + "\n"), 2_000);
  const killer = setTimeout(() => child.kill("SIGKILL"), 20_000);
  return new Promise((resolve) =>
    child.once("close", (code, signal) => {
      clearTimeout(quit);
      clearTimeout(killer);
      resolve({ code, signal, stderr });
    }),
  );
}

test("the wrapper runs QEMU under its seccomp sandbox: asked to start a program, QEMU dies instead", async () => {
  const launcher = await prepareQemuLauncher(path.join(dir, "bin"));
  expect(launcher).toMatchObject({ seccomp: true });
  const script = fs.readFileSync(launcher.qemuPath, "utf8");
  expect(script).toContain("-sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
  expect(script).toContain("--no-new-privs");
  // QMP's `migrate` to `exec:` runs a shell command from QEMU: what an escaped guest would do.
  const migrate = (marker: string) => ({ execute: "migrate", arguments: { uri: `exec:touch ${marker}` } });
  // Without the wrapper the command runs (so the test can fail)...
  const unconfined = path.join(dir, "unconfined");
  await expect(runQmp(launcher.emulatorPath, [migrate(unconfined)])).resolves.toMatchObject({ code: 0 });
  expect(fs.existsSync(unconfined)).toBe(true);
  // ...through it, the kernel kills QEMU at the fork (SIGSYS) and nothing runs.
  const confined = path.join(dir, "confined");
  await expect(runQmp(launcher.qemuPath, [migrate(confined)])).resolves.toMatchObject({ signal: "SIGSYS" });
  expect(fs.existsSync(confined)).toBe(false);
}, 60_000);

test("the wrapped QEMU: seccomp filter, no_new_privs, no core dumps, umask 077, the run dir as cwd", async () => {
  const launcher = await prepareQemuLauncher(path.join(dir, "bin"));
  const runtime = path.join(dir, "run");
  await fsp.mkdir(runtime);
  const chardev = `socket,id=virtiocon0,path=${runtime}/ctl.sock,server=on,wait=off`;
  const qemu = spawn(launcher.qemuPath, [...idleQemuArgs(`${dir}/facts`), "-chardev", chardev], { stdio: "ignore" });
  await new Promise((resolve) => qemu.once("spawn", resolve));
  started.push(qemu.pid!);
  // The wrapper execs QEMU in place: wait until the pid is QEMU's, with its QMP socket up.
  expect(await eventually(() => fs.existsSync(path.join(runtime, "qmp.sock")), 10_000)).toBe(true);
  const status = fs.readFileSync(`/proc/${qemu.pid}/status`, "utf8");
  expect(status).toMatch(/^Seccomp:\t2$/m);
  expect(status).toMatch(/^NoNewPrivs:\t1$/m);
  expect(status).toMatch(/^Umask:\t0077$/m);
  expect(fs.readFileSync(`/proc/${qemu.pid}/limits`, "utf8")).toMatch(/^Max core file size\s+0\s+0\s/m);
  expect(fs.readlinkSync(`/proc/${qemu.pid}/cwd`)).toBe(runtime);
  expect(fs.statSync(path.join(runtime, "qmp.sock")).mode & 0o077).toBe(0);
});

test("a QEMU without seccomp support still gets a working wrapper, without -sandbox, and says why", async () => {
  const fakeBin = await qemuWithoutSeccomp(dir);
  const previous = process.env.PATH;
  process.env.PATH = `${fakeBin}${path.delimiter}${previous}`;
  try {
    const launcher = await prepareQemuLauncher(path.join(dir, "bin"));
    expect(launcher).toMatchObject({ seccomp: false, seccompProblem: "-sandbox: There is no option group 'sandbox'" });
    expect(fs.readFileSync(launcher.qemuPath, "utf8")).not.toContain("-sandbox on");
    expect(execFileSync(launcher.qemuPath, ["--version"], { encoding: "utf8" })).toMatch(/QEMU emulator version/);
  } finally {
    process.env.PATH = previous;
  }
});

test("SIGKILL of the owning process takes QEMU down with it", async () => {
  const launcher = await prepareQemuLauncher(path.join(dir, "bin"));
  const script = `
    import { spawn } from "node:child_process";
    const qemu = spawn(${JSON.stringify(launcher.qemuPath)}, ${JSON.stringify(idleQemuArgs(`${dir}/owned`))}, { stdio: "ignore" });
    qemu.on("spawn", () => process.stdout.write(qemu.pid + "\\n")); // console.log may colour numbers
    setInterval(() => {}, 1000);
  `;
  const owner = spawn(process.execPath, [...TS_NODE_ARGS, "--input-type=module", "-e", script], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  try {
    // The owner prints QEMU's pid once spawned; on a loaded host that can take a while.
    let printed = "";
    const qemuPid = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`owner printed no pid in 20 s (got ${JSON.stringify(printed)})`)),
        20_000,
      );
      owner.stdout.on("data", (d: Buffer) => {
        printed += String(d);
        const match = /^(\d+)\n/m.exec(printed);
        if (match) {
          clearTimeout(timer);
          resolve(Number(match[1]));
        }
      });
    });
    started.push(qemuPid);
    // Once the wrapper has become QEMU (its parent-death signal is set by then).
    const emulator = fs.realpathSync(launcher.emulatorPath);
    const isQemu = () => {
      try {
        return alive(qemuPid) && fs.readlinkSync(`/proc/${qemuPid}/exe`) === emulator;
      } catch {
        return false; // gone between the two looks
      }
    };
    expect(await eventually(isQemu, 10_000)).toBe(true);
    owner.kill("SIGKILL");
    expect(await eventually(() => !alive(qemuPid), 10_000)).toBe(true);
  } finally {
    // Never leave the owner behind: a live child keeps jest from exiting.
    owner.kill("SIGKILL");
  }
}, 60_000);

test("under setpriv, a wrapper whose owner is already gone exits instead of starting QEMU", async () => {
  const launcher = (await prepareQemuLauncher(path.join(dir, "bin"))).qemuPath;
  // The wrapper's second run, as setpriv starts it: its first argument names the owner it expects
  // as its parent. Here that owner has exited (the owner died before the parent-death signal was set).
  const gone = spawnSync("true");
  const run = spawnSync(launcher, [`--pi-sandbox-owner=${gone.pid}`, ...idleQemuArgs(`${dir}/orphan`)], {
    encoding: "utf8",
    timeout: 30_000,
  });
  expect(run.status).toBe(1);
  expect(run.stderr).toContain("the process that started QEMU is gone");
});

test("reapStrayQemu kills a QEMU of a dead owner that uses the directory, and nothing else", async () => {
  const diskDir = path.join(dir, "disk");
  await fsp.mkdir(diskDir);
  const qemu = spawn("qemu-system-x86_64", idleQemuArgs(`${diskDir}/layer-0000000000000000.qcow2`), {
    stdio: "ignore",
    detached: true,
  });
  await new Promise((resolve) => qemu.once("spawn", resolve));
  started.push(qemu.pid!);
  const deadOwner = 2 ** 22 + 12345;
  const record = (pid: number) =>
    fsp.writeFile(path.join(diskDir, QEMU_PID_FILE), JSON.stringify({ pid, ownerPid: deadOwner, dir: diskDir }));

  // A pid that is not a QEMU of this directory is left alone.
  const sleeper = spawn("sleep", ["30"], { stdio: "ignore" });
  started.push(sleeper.pid!);
  await record(sleeper.pid!);
  await expect(reapStrayQemu(diskDir)).resolves.toEqual({ skipped: "not-our-qemu" });
  expect(alive(sleeper.pid!)).toBe(true);

  await record(qemu.pid!);
  await expect(reapStrayQemu(diskDir)).resolves.toEqual({ killedPid: qemu.pid });
  expect(alive(qemu.pid!)).toBe(false);
  expect(fs.existsSync(path.join(diskDir, QEMU_PID_FILE))).toBe(false);
  await expect(reapStrayQemu(diskDir)).resolves.toEqual({ skipped: "no-record" });
});
