import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { QEMU_PID_FILE, prepareQemuLauncher, reapStrayQemu } from "../src/index.js";
import { TS_NODE_ARGS, tempDir } from "./helpers.js";

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
  expect(execFileSync(launcher.qemuPath, ["--version"], { encoding: "utf8" })).toMatch(/QEMU emulator version/);
  // Regenerating leaves an identical file alone.
  const before = fs.statSync(launcher.qemuPath).mtimeMs;
  await prepareQemuLauncher(path.join(dir, "bin"));
  expect(fs.statSync(launcher.qemuPath).mtimeMs).toBe(before);
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
    expect(await eventually(() => alive(qemuPid), 10_000)).toBe(true);
    owner.kill("SIGKILL");
    expect(await eventually(() => !alive(qemuPid), 10_000)).toBe(true);
  } finally {
    // Never leave the owner behind: a live child keeps jest from exiting.
    owner.kill("SIGKILL");
  }
}, 60_000);

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
