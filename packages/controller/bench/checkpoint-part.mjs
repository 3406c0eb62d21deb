// The controller bench's checkpoint part: what automatic checkpoints cost a guest that writes
// steadily (a loop appending to a file and syncing every second): the CPU share of its daemon and
// QEMU (qemu-img children included) over 120 s with `checkpoint.every: 30s` against `off`, and the
// guest's disk stall of each live checkpoint, read from the controller log.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { callAction, StateLayout } from "../dist/client/index.js";
import { median, row, sleep } from "./kit.mjs";

const MEASURE_MS = 120_000;
/** After create: the boot's and setup's CPU has died down, and a 30 s clock has run once. */
const SETTLE_MS = 30_000;
const WRITER = "nohup sh -c 'while true; do date >> /root/steady.log; sync; sleep 1; done' >/dev/null 2>&1 &";

/** CPU time of `pid` and its waited-for children (qemu-img) so far, in ms, from /proc. */
function cpuMsWithChildren(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // utime, stime, cutime, cstime: fields 14-17 of stat(5), 12-15 after the name.
  return fields.slice(11, 15).reduce((sum, ticks) => sum + Number(ticks), 0) * 10;
}

/** The daemon + QEMU CPU share of instance `name`, in percent of one core, over MEASURE_MS. */
async function steadyWriterCpu(env, dir, image, name, every) {
  writeFileSync(
    join(dir, `${name}.yaml`),
    `version: 1\nprofile: tiny\ndiskGiB: 4\nimage: ${image}\ncheckpoint:\n  every: ${every}\n`,
  );
  await callAction({ action: "create", name, config: `${name}.yaml` }, { env, cwd: dir });
  await callAction({ action: "exec", name, cmd: WRITER }, { env });
  await sleep(SETTLE_MS);
  const view = await callAction({ action: "inspect", name }, { env });
  const status = JSON.parse(readFileSync(new StateLayout(env.PI_SANDBOX_HOME).statusFile("instances", name), "utf8"));
  const pids = [view.daemonPid, status.qemuPid];
  if (pids.some((pid) => !pid)) throw new Error(`${name}: no daemon or QEMU pid (${pids.join(", ")})`);
  const before = pids.map(cpuMsWithChildren);
  const t = performance.now();
  await sleep(MEASURE_MS);
  const after = pids.map(cpuMsWithChildren);
  const wallMs = performance.now() - t;
  const cpu = ((after[0] - before[0] + after[1] - before[1]) / wallMs) * 100;
  await callAction({ action: "stop", name }, { env });
  return cpu;
}

/** Adds the checkpoint rows: `env` has the bench's PI_SANDBOX_HOME, `dir` is its temp directory. */
export async function checkpointRows({ env, dir, image }) {
  const off = await steadyWriterCpu(env, dir, image, "ckoff", "off");
  const every = await steadyWriterCpu(env, dir, image, "ck30", "30s");
  const log = readFileSync(new StateLayout(env.PI_SANDBOX_HOME).logFile("instances", "ck30"), "utf8");
  const taken = [...log.matchAll(/checkpoint \d+ after .*: guest stalled (\d+) ms, .*, (\d+) ms in all/g)];
  if (taken.length === 0) throw new Error("ck30 took no automatic checkpoint");
  const stalls = taken.map((m) => Number(m[1]));
  const totals = taken.map((m) => Number(m[2]));
  row(
    "daemon + QEMU CPU, guest appending and syncing every second for 120 s: checkpoint.every 30s vs off",
    every,
    off,
    "%",
    "extra <= 1 % of a core",
    `extra ${(every - off).toFixed(2)} % of a core; ${taken.length} checkpoints in the run`,
  );
  row(
    `live checkpoint of that guest: its disk stall (median of ${stalls.length})`,
    median(stalls),
    undefined,
    "ms",
    "<= 300",
    `max ${Math.max(...stalls)} ms; whole checkpoint (guest sync, layer, flip) median ${median(totals)} ms`,
  );
}
