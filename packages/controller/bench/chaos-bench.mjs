// Chaos benchmark (part of `npm run bench`, never CI): one instance on a real VM, killed again and
// again at random moments: its daemon while it runs, during a stop, during a suspend; its QEMU
// alone. After each kill a start must serve again, every file the guest synced before the kill must
// be there, and the disk's file system must be clean (the chain converted to a raw image on the
// host, `e2fsck -fn`). Prints how many held, and a recovery start against a normal cold start.
// PI_SANDBOX_CHAOS_KILLS sets the number of kills (default 50).
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction, StateLayout } from "../dist/client/index.js";
import { readStatus } from "../dist/state/records.js";
import { benchImage, median, printRows, row, sleep } from "./kit.mjs";

const KILLS = Number(process.env.PI_SANDBOX_CHAOS_KILLS ?? 50);
const image = benchImage();
const dir = mkdtempSync(join(tmpdir(), "chaos-"));
const env = { ...process.env, PI_SANDBOX_HOME: join(dir, "state") };
const layout = new StateLayout(env.PI_SANDBOX_HOME);
const call = (action) => callAction(action, { env, cwd: dir });
const NAME = "chaos";

/** Polls the status file (no QEMU sampling) until `state` or `ms` passed; true when seen. */
async function reaches(state, ms) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if ((await readStatus(layout, "instances", NAME))?.state === state) return true;
    await sleep(10);
  }
  return false;
}

const qemuPids = () =>
  spawnSync("pgrep", ["-f", `qemu-system.*${dir}`], { encoding: "utf8" })
    .stdout.split("\n")
    .filter(Boolean)
    .map(Number);

/** SIGKILL, where a process that already ended is no error (a stop may finish first). */
function kill(pid) {
  try {
    process.kill(pid, "SIGKILL");
  } catch (error) {
    if (error.code !== "ESRCH") throw error;
  }
}

/** Waits until no QEMU of this run is left (a killed daemon takes its QEMU with it). */
async function qemuGone() {
  for (let i = 0; i < 150 && qemuPids().length > 0; i++) await sleep(100);
}

/** The instance's disk as a raw file system, checked by e2fsck; true when clean. */
function fsckClean() {
  const disk = layout.diskDir("instances", NAME);
  const pointer = JSON.parse(readFileSync(join(disk, "disk.json"), "utf8"));
  const raw = join(dir, "check.raw");
  execFileSync("qemu-img", ["convert", "-O", "raw", join(disk, pointer.layers.at(-1)), raw]);
  const fsck = spawnSync("e2fsck", ["-fn", raw], { encoding: "utf8" });
  rmSync(raw, { force: true });
  return fsck.status === 0;
}

const ways = {
  /** SIGKILL of the daemon while the instance runs. */
  async running(pid) {
    await sleep(Math.random() * 2000);
    kill(pid);
  },
  /** SIGKILL of the daemon at a random moment of a stop. */
  async stop(pid) {
    const stopping = call({ action: "stop", name: NAME }).catch(() => undefined);
    await reaches("stopping", 10_000);
    await sleep(Math.random() * 800);
    kill(pid);
    await stopping;
  },
  /** SIGKILL of the daemon at a random moment of a suspend. */
  async suspend(pid) {
    const suspending = call({ action: "suspend", name: NAME }).catch(() => undefined);
    await reaches("suspending", 10_000);
    await sleep(Math.random() * 3000);
    kill(pid);
    await suspending;
  },
  /** SIGKILL of QEMU alone; the daemon sees its VM gone. */
  async qemu() {
    await sleep(Math.random() * 2000);
    for (const pid of qemuPids()) kill(pid);
    await reaches("failed", 30_000);
  },
};

try {
  writeFileSync(join(dir, "sandbox.yaml"), `version: 1\nprofile: tiny\ndiskGiB: 4\nimage: ${image}\n`);
  await call({ action: "create", name: NAME, config: "sandbox.yaml" });
  const held = [];
  const failures = [];
  const recoveryStarts = [];
  const coldStarts = [];
  // A normal cold start, for the ratio: a stop, then a start.
  for (let i = 0; i < 3; i++) {
    await call({ action: "stop", name: NAME });
    const t = performance.now();
    await call({ action: "start", name: NAME });
    coldStarts.push(performance.now() - t);
  }
  for (let i = 0; i < KILLS; i++) {
    const way = Object.keys(ways)[i % Object.keys(ways).length];
    // Synced before the kill: must survive it.
    const wrote = await call({
      action: "exec",
      name: NAME,
      cmd: `echo ${i} > /workspace/synced-${i}.txt && sync && (dd if=/dev/urandom of=/workspace/noise bs=64k count=64 2>/dev/null &)`,
    });
    if (wrote.exitCode !== 0) throw new Error(`write ${i} failed: ${wrote.output}`);
    const { daemonPid } = await call({ action: "inspect", name: NAME });
    await ways[way](daemonPid);
    await qemuGone();
    const t = performance.now();
    let ok = true;
    let why = "";
    try {
      const started = await call({ action: "start", name: NAME });
      recoveryStarts.push(performance.now() - t);
      const listed = await call({
        action: "exec",
        name: NAME,
        cmd: "cat /workspace/synced-*.txt | sort -n | tr '\\n' ' '",
      });
      const want = Array.from({ length: i + 1 }, (_, k) => k).join(" ");
      if (listed.output.trim() !== want) {
        ok = false;
        why = `files ${listed.output.trim()} (want ${want}); reopened ${JSON.stringify(started.recovery ?? "checkpoint")}`;
      }
      await call({ action: "stop", name: NAME });
      if (!fsckClean()) {
        ok = false;
        why += " e2fsck found errors";
      }
      await call({ action: "start", name: NAME });
    } catch (error) {
      ok = false;
      why = String(error?.message ?? error);
      await call({ action: "start", name: NAME }).catch(() => undefined);
    }
    (ok ? held : failures).push(`${i} ${way}${why ? `: ${why}` : ""}`);
    console.error(`[chaos] ${i + 1}/${KILLS} ${way}: ${ok ? "held" : `LOST ${why}`}`);
  }
  row(
    `chaos: kills after which every synced file was there and fsck clean (of ${KILLS})`,
    held.length,
    KILLS,
    "kills",
    `${KILLS} of ${KILLS}`,
  );
  row(
    "chaos: a start after a kill vs a start after stop (median)",
    median(recoveryStarts),
    median(coldStarts),
    "ms",
    "<= 1.2",
  );
  printRows();
  for (const failure of failures) console.log(`- lost: ${failure}`);
} finally {
  await call({ action: "destroy", name: NAME, confirm: NAME }).catch(() => undefined);
  for (const pid of qemuPids()) kill(pid);
  rmSync(dir, { recursive: true, force: true });
}
