// Branches benchmark (part of `npm run bench`, never CI): issue #46's targets for fork, kept
// checkpoints and rewind, side by side in one run on one tiny instance with a previewed web server:
// - fork: how long the source's preview goes unanswered while `fork --count 4` copies it (a poller
//   GETs it every 20-50 ms), and that fork until all four answer their previews vs one cold create
//   to its first preview byte;
// - the four forks idle: their QEMUs' total PSS vs the source's (one idle instance); with
//   PI_SANDBOX_BENCH_KSM=1 (root) again with the host's KSM merging the pages they share;
// - distinct identities: machine-id, hostname, urandom bytes and an ssh host key of each fork;
// - disk checkpoints while the guest writes (append + fsync every 25 ms): the guest's disk stall of
//   each, and the bytes each keeps vs the bytes the guest wrote to its disk since the one before;
//   then with the written file in /workspace, each call vs one with the file outside it;
// - rewind to a serving preview, from a memory and from a disk checkpoint, vs a cold start.
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction, StateLayout } from "../dist/client/index.js";
import { readStatus } from "../dist/state/records.js";
import { qemuResidentMemory } from "@pi-sandbox/vm/host";
import { benchImage, median, printRows, row as addRow, sleep, webYaml, firstByte } from "./kit.mjs";

const FORKS = 4;
const CHECKPOINTS = Number(process.env.PI_SANDBOX_BENCH_CHECKPOINTS ?? 20);
const SRC = "src";
const image = benchImage();
const dir = mkdtempSync(join(tmpdir(), "brb-"));
const env = { ...process.env, PI_SANDBOX_HOME: join(dir, "state") };
const layout = new StateLayout(env.PI_SANDBOX_HOME);
const call = (action, options = {}) => callAction(action, { env, cwd: dir, ...options });
const exec = async (name, cmd) => {
  const result = await call({ action: "exec", name, cmd, timeoutMs: 60_000 });
  if (result.exitCode !== 0)
    throw new Error(`${name}: ${cmd.split("\n")[0]} exited ${result.exitCode}: ${result.output}`);
  return result.output;
};
const MiB = 2 ** 20;
const log = (message) => process.stderr.write(`branches: ${message}\n`);
/** Polls `url` until it answers 200 with `body` (every 25 ms, for at most 5 min). */
const serves = (url, body) => firstByte(url, body, { deadlineMs: 300_000, pollMs: 25 });
/** Records a row (kit.mjs) and says it at once: a later step that fails still leaves it in the output. */
function row(name, ours, baseline, unit, target, note = "") {
  addRow(name, ours, baseline, unit, target, note);
  log(`${name}: ${ours.toFixed(1)}${baseline ? ` vs ${baseline.toFixed(1)}` : ""} ${unit} ${note}`);
}

/**
 * GETs `url` every 20-50 ms (each waits for its answer, up to 2 min); `stop` returns when each was
 * answered 200, and when each got an error or another status instead.
 */
function poll(url) {
  const answers = [];
  const failed = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      try {
        const res = await fetch(url, { signal: AbortSignal.timeout(120_000) });
        await res.text();
        (res.status === 200 ? answers : failed).push(performance.now());
      } catch {
        failed.push(performance.now());
      }
      await sleep(20 + Math.random() * 30);
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return { answers, failed };
    },
  };
}

/** The longest time between two answers (or the window's edges) within [from, to]. */
function longestUnanswered(answers, from, to) {
  const inside = [from, ...answers.filter((at) => at > from && at < to), to];
  let longest = 0;
  for (let i = 1; i < inside.length; i++) longest = Math.max(longest, inside[i] - inside[i - 1]);
  return longest;
}

/** From /proc/<pid>/smaps_rollup: PSS, RSS and the shared part of the RSS, in MiB. */
function memoryOf(pid) {
  const text = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
  const kib = (field) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? 0);
  return {
    pss: kib("Pss") / 1024,
    rss: kib("Rss") / 1024,
    shared: (kib("Shared_Clean") + kib("Shared_Dirty")) / 1024,
    anonymous: kib("Anonymous") / 1024,
  };
}

/**
 * The host's KSM (kernel samepage merging) on while `measure` runs, then as it was. QEMU marks guest
 * RAM mergeable, so forks resumed from one memory image can share the pages none of them changed
 * since; KSM is a host-wide setting (root), off by default, so the bench turns it on only when
 * asked (PI_SANDBOX_BENCH_KSM=1). Waits for two full scans (at most 3 min) before measuring.
 */
async function withKsm(measure) {
  const ksm = (file) => `/sys/kernel/mm/ksm/${file}`;
  const read = (file) => readFileSync(ksm(file), "utf8").trim();
  const saved = { run: read("run"), pages_to_scan: read("pages_to_scan") };
  try {
    writeFileSync(ksm("pages_to_scan"), "5000");
    writeFileSync(ksm("run"), "1");
    const scans = Number(read("full_scans"));
    const deadline = Date.now() + 180_000;
    while (Number(read("full_scans")) < scans + 2 && Date.now() < deadline) await sleep(1000);
    log(
      `KSM: ${Number(read("full_scans")) - scans} full scans, ${read("pages_sharing")} pages sharing ${read("pages_shared")}`,
    );
    await measure();
  } finally {
    writeFileSync(ksm("run"), saved.run);
    writeFileSync(ksm("pages_to_scan"), saved.pages_to_scan);
  }
}

/** The forks' QEMU PSS against the source's again, with KSM merging what they share. */
async function forkPssRow(forkNames, srcMemory) {
  const forks = [];
  for (const name of forkNames) forks.push(memoryOf(await qemuPidOf(name)));
  const src = memoryOf(await qemuPidOf(SRC));
  const total = forks.reduce((sum, m) => sum + m.pss, 0);
  row(
    `${FORKS} idle forks: QEMU PSS, all together vs one idle instance's, with the host's KSM on`,
    total,
    src.pss,
    "MiB",
    "<= 2.0",
    `the source ${srcMemory.pss.toFixed(0)} MiB before KSM; RSS of the forks ${forks.reduce((sum, m) => sum + m.rss, 0).toFixed(0)} MiB`,
  );
}

async function qemuPidOf(name) {
  const pid = (await readStatus(layout, "instances", name))?.qemuPid;
  if (!pid) throw new Error(`${name} has no QEMU`);
  return pid;
}

/** Host bytes of the layers kept checkpoint `id` holds that `previous` (a kept checkpoint's record) does not. */
function keptBytesBeyond(id, previous) {
  const kept = join(layout.diskDir("instances", SRC), "checkpoints", id);
  const record = JSON.parse(readFileSync(join(kept, "checkpoint.json"), "utf8"));
  const fresh = record.layers.filter((layer) => !previous?.layers.includes(layer));
  return { record, bytes: fresh.reduce((sum, layer) => sum + statSync(join(kept, layer)).blocks * 512, 0) };
}

// The guest's writer: appends 32 KiB to its file and fsyncs every 25 ms, timing each append + fsync; SIGUSR1
// writes the times so far to /dev/shm (no disk write) and starts a new list.
const WRITER = `import json, os, signal, sys, time
out = open(sys.argv[1], "ab")
data = os.urandom(32768)
times = []
def dump(*_):
    with open("/dev/shm/write-times.json", "w") as f:
        json.dump(times, f)
    times.clear()
signal.signal(signal.SIGUSR1, dump)
while True:
    t = time.monotonic()
    out.write(data)
    out.flush()
    os.fsync(out.fileno())
    times.append((time.monotonic() - t) * 1000)
    time.sleep(0.025)
`;

/** Bytes the guest has written to its root disk so far (the block device's sector count). */
const DISK_WRITTEN =
  "dev=$(basename \"$(findmnt -no SOURCE /)\"); dev=${dev%%[0-9]*}; echo $(( $(awk '{print $7}' /sys/block/$dev/stat) * 512 ))";

const percentile = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];

try {
  writeFileSync(join(dir, "web.yaml"), webYaml(image, "branch"));

  // One cold create, to its first preview byte: the baseline of the fork.
  log("creating the source instance");
  let t = performance.now();
  const created = await call({ action: "create", name: SRC, config: "web.yaml" });
  const srcUrl = created.previews[0].url;
  await serves(srcUrl, "branch\n");
  const coldCreate = performance.now() - t;

  // Fork into four while a poller reads the source's preview.
  await sleep(10_000);
  log(`forking into ${FORKS}`);
  const poller = poll(srcUrl);
  await sleep(3_000);
  const said = [];
  const forkWall = Date.now();
  const forkStart = performance.now();
  const forked = await call(
    { action: "fork", name: SRC, count: FORKS },
    { onProgress: (event) => said.push({ at: performance.now() - forkStart, message: event.message }) },
  );
  const forkNames = forked.forks.map((f) => f.name);
  await Promise.all(forked.started.map((view) => serves(view.previews[0].url, "branch\n")));
  const allServing = performance.now() - forkStart;
  await sleep(3_000);
  const { answers, failed } = await poller.stop();
  const failedInFork = failed.filter((at) => at > forkStart && at < forkStart + allServing).length;
  // Where the source's pause went, as its controller logged it (its preview's refusals counted).
  let refusals = 0;
  for (const line of readFileSync(layout.logFile("instances", SRC), "utf8").split("\n")) {
    const at = Date.parse(line.slice(0, line.indexOf(" ")));
    if (!(at >= forkWall && at <= forkWall + allServing)) continue;
    if (/\[preview\]/.test(line)) refusals++;
    else log(`  +${at - forkWall} ms ${line.slice(line.indexOf(" ") + 1)}`);
  }
  const unanswered = longestUnanswered(answers, forkStart, forkStart + allServing);
  const at = (pattern) => said.find((e) => pattern.test(e.message))?.at;
  const saving = at(/^saving .* memory while it runs/);
  const copied = said.filter((e) => /^forked /.test(e.message)).at(-1)?.at;
  row(
    `fork --count ${FORKS} of a serving instance: its preview's longest stretch unanswered`,
    unanswered,
    undefined,
    "ms",
    "<= 1500",
    `QEMU paused it ${forked.pauseMs?.toFixed(0)} ms (the last memory pages and the disk's layer switch); ` +
      `its memory saved while it ran and the ${FORKS} copies made ${(copied - saving).toFixed(0)} ms; ` +
      `meanwhile ${failedInFork} requests answered with an error (${refusals} refusals logged)`,
  );
  row(
    `fork --count ${FORKS} until all ${FORKS} answer their previews vs one cold create to its first preview byte`,
    allServing,
    coldCreate,
    "ms",
    "<= 1.0",
    `fork answered (forks made, ${FORKS} started) after ${(said.at(-1)?.at ?? 0).toFixed(0)} ms`,
  );

  // Distinct identities: each fork against the source and the other forks.
  log("reading identities");
  const IDENTITY =
    "cat /etc/machine-id; hostname; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; " +
    "test -f /etc/ssh/ssh_host_ed25519_key || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key >/dev/null; " +
    "cut -d' ' -f2 /etc/ssh/ssh_host_ed25519_key.pub";
  const identities = new Map();
  for (const name of [SRC, ...forkNames]) identities.set(name, (await exec(name, IDENTITY)).trim().split("\n"));
  const fields = ["machine-id", "hostname", "32 bytes of /dev/urandom", "ssh host key (ed25519)"];
  fields.forEach((field, i) => {
    const own = forkNames.filter((name) =>
      [...identities].every(([other, values]) => other === name || values[i] !== identities.get(name)[i]),
    ).length;
    row(`forks with their own ${field}`, (own / FORKS) * 100, undefined, "%", "100", `${own} of ${FORKS}`);
  });

  // The four forks and the source idle: QEMU memory.
  log("letting the forks idle");
  await sleep(30_000);
  const forkMemory = [];
  const parts = { guest: 0, cache: 0 };
  for (const name of forkNames) {
    forkMemory.push(memoryOf(await qemuPidOf(name)));
    const resident = await qemuResidentMemory(layout.diskDir("instances", name));
    parts.guest += (resident?.guestBytes ?? 0) / MiB;
    parts.cache += (resident?.translationCacheBytes ?? 0) / MiB;
  }
  const srcMemory = memoryOf(await qemuPidOf(SRC));
  const sum = (key) => forkMemory.reduce((total, m) => total + m[key], 0);
  row(
    `${FORKS} idle forks: QEMU PSS, all together vs one idle instance's (the source)`,
    sum("pss"),
    srcMemory.pss,
    "MiB",
    "<= 2.0",
    `RSS ${sum("rss").toFixed(0)} MiB of which shared ${sum("shared").toFixed(0)} MiB, anonymous ${sum("anonymous").toFixed(0)} MiB ` +
      `(guest RAM ${parts.guest.toFixed(0)}, TCG translation caches ${parts.cache.toFixed(0)} MiB); ` +
      `the source: RSS ${srcMemory.rss.toFixed(0)}, shared ${srcMemory.shared.toFixed(0)}, anonymous ${srcMemory.anonymous.toFixed(0)} MiB`,
  );
  if (process.env.PI_SANDBOX_BENCH_KSM === "1") await withKsm(() => forkPssRow(forkNames, srcMemory));
  for (const name of forkNames) await call({ action: "destroy", name, confirm: name });

  // Disk checkpoints while the guest writes: its file outside the workspace, then inside it.
  log(`${CHECKPOINTS} disk checkpoints while the guest writes`);
  await exec(SRC, `cat > /root/writer.py <<'EOF'\n${WRITER}EOF`);
  const startWriter = (file) =>
    exec(SRC, `nohup python3 /root/writer.py ${file} >/dev/null 2>&1 & echo $! > /root/writer.pid`);
  const writeTimes = async () => {
    await exec(SRC, "kill -USR1 $(cat /root/writer.pid) && sleep 0.5");
    return JSON.parse(await exec(SRC, "cat /dev/shm/write-times.json"));
  };
  /** `count` checkpoints 1 s apart; for each after the first: bytes kept, written to the disk, appended. */
  const checkpointsWhileWriting = async (file, count, label) => {
    const stalls = [];
    const took = [];
    const leftOut = new Set();
    const kept = [];
    const written = [];
    const appended = [];
    const counters = async () =>
      (await exec(SRC, `stat -c %s ${file}; ${DISK_WRITTEN}`)).trim().split("\n").map(Number);
    let before = await counters();
    let previous;
    for (let i = 0; i < count; i++) {
      await sleep(1_000);
      const t = performance.now();
      const taken = await call({ action: "checkpoint", name: SRC, label: `${label}${i}` });
      took.push(performance.now() - t);
      const now = await counters();
      stalls.push(taken.stallMs);
      for (const file of taken.checkpoint.leftOut?.files ?? []) leftOut.add(file);
      const { record, bytes } = keptBytesBeyond(taken.checkpoint.id, previous);
      // The first one also holds all that came before: only the later ones are compared.
      if (previous) {
        kept.push(bytes);
        appended.push(now[0] - before[0]);
        written.push(now[1] - before[1]);
      }
      before = now;
      previous = record;
    }
    return { stalls, took, kept, written, appended, leftOut: [...leftOut] };
  };
  await startWriter("/root/written.bin");
  await sleep(5_000);
  await writeTimes();
  const t0 = performance.now();
  const plain = await checkpointsWhileWriting("/root/written.bin", CHECKPOINTS, "w");
  const busyMs = performance.now() - t0;
  const busy = await writeTimes();
  await sleep(busyMs);
  const quiet = await writeTimes();
  await exec(SRC, "kill $(cat /root/writer.pid)");
  row(
    `disk checkpoint while the guest appends and fsyncs every 25 ms: guest disk stall (p95 of ${CHECKPOINTS})`,
    percentile(plain.stalls, 0.95),
    undefined,
    "ms",
    "<= 300",
    `median ${median(plain.stalls).toFixed(0)}, max ${Math.max(...plain.stalls).toFixed(0)} ms; ` +
      `each checkpoint call ${median(plain.took).toFixed(0)} ms (median)`,
  );
  row(
    `the guest's slowest append + fsync: during the ${CHECKPOINTS} checkpoints vs as long without`,
    Math.max(...busy),
    Math.max(...quiet),
    "ms",
    "",
    `p99 ${percentile(busy, 0.99).toFixed(0)} vs ${percentile(quiet, 0.99).toFixed(0)} ms; ${busy.length} and ${quiet.length} appends`,
  );
  const over = plain.kept.map((bytes, i) => bytes - plain.written[i]);
  row(
    `disk checkpoint: bytes it keeps beyond what the guest wrote to its disk since the one before (worst of ${over.length})`,
    Math.max(...over) / MiB,
    undefined,
    "MiB",
    "<= 1",
    `medians: kept ${(median(plain.kept) / MiB).toFixed(2)} MiB, written to the disk ${(median(plain.written) / MiB).toFixed(2)} MiB, ` +
      `appended by the writer ${(median(plain.appended) / MiB).toFixed(2)} MiB`,
  );
  // The same writer on a file in the workspace, which each checkpoint of a running instance
  // records in the guest's workspace store first (for diff --since); a file over the record's
  // limit is left out and named, so the call should cost what it costs with the file outside.
  const workspaceFile = "/workspace/written.bin";
  await exec(SRC, `cp /root/written.bin ${workspaceFile} && rm /root/written.bin && sync`);
  const fileMiB = Number(await exec(SRC, `stat -c %s ${workspaceFile}`)) / MiB;
  await startWriter(workspaceFile);
  const inWorkspace = await checkpointsWhileWriting(workspaceFile, 4, "ws");
  await exec(SRC, `kill $(cat /root/writer.pid); rm ${workspaceFile}`);
  row(
    `disk checkpoint call, the writer's file in /workspace (${fileMiB.toFixed(0)} MiB and growing) vs outside it (median)`,
    median(inWorkspace.took),
    median(plain.took),
    "ms",
    "",
    `left out of the workspace record: ${inWorkspace.leftOut.join(", ") || "nothing"}; stall ${median(inWorkspace.stalls).toFixed(0)} ms (median)`,
  );
  row(
    `disk checkpoint, the writer's file in /workspace: bytes kept vs appended (median of ${inWorkspace.kept.length})`,
    median(inWorkspace.kept) / MiB,
    median(inWorkspace.appended) / MiB,
    "MiB",
    "",
    `written to the disk ${(median(inWorkspace.written) / MiB).toFixed(2)} MiB (median)`,
  );

  // Rewind to a serving preview, against a cold start (stop, then start).
  log("rewinds and cold starts");
  await exec(SRC, "printf 'memory\\n' > /workspace/index.html");
  await call({ action: "checkpoint", name: SRC, label: "mem", memory: true });
  await exec(SRC, "printf 'disk\\n' > /workspace/index.html");
  await call({ action: "checkpoint", name: SRC, label: "disk" });
  // A fork of the kept memory checkpoint while src serves: nothing of src is paused.
  const fromPoller = poll(srcUrl);
  await sleep(2_000);
  const fromStart = performance.now();
  const fromFork = await call({ action: "fork", name: SRC, names: ["from-mem"], from: "mem" });
  await serves(fromFork.started[0].previews[0].url, "memory\n");
  const fromServing = performance.now() - fromStart;
  await sleep(2_000);
  const fromAnswers = (await fromPoller.stop()).answers;
  row(
    "fork --from a memory checkpoint of the serving instance: its preview's longest stretch unanswered",
    longestUnanswered(fromAnswers, fromStart, fromStart + fromServing),
    undefined,
    "ms",
    "<= 1500",
    `the fork answered its preview after ${fromServing.toFixed(0)} ms (${fromFork.started[0].restore?.warm ? "resumed warm" : "booted"}); the source was not paused`,
  );
  await call({ action: "destroy", name: "from-mem", confirm: "from-mem" });
  /** `action` until its preview serves `body`; the last run's progress messages with their times are kept. */
  const phases = {};
  const timed = async (action, body) => {
    const start = performance.now();
    const said = [];
    const view = await call(action, {
      onProgress: (event) => said.push(`+${(performance.now() - start).toFixed(0)} ${event.message}`),
    });
    await serves(view.previews[0].url, body);
    const ms = performance.now() - start;
    phases[`${action.action} ${action.checkpoint ?? ""}`] = [...said, `+${ms.toFixed(0)} first preview byte`];
    return { ms, view };
  };
  const fromMemory = [];
  const fromDisk = [];
  const cold = [];
  const stopStart = [];
  const restores = [];
  for (let round = 0; round < 2; round++) {
    await exec(SRC, "printf 'later\\n' > /workspace/index.html");
    const memory = await timed({ action: "rewind", name: SRC, checkpoint: "mem" }, "memory\n");
    fromMemory.push(memory.ms);
    restores.push(
      memory.view.restore?.warm === true ? "warm" : `cold (${memory.view.restore?.reason ?? "no restore"})`,
    );
    fromDisk.push((await timed({ action: "rewind", name: SRC, checkpoint: "disk" }, "disk\n")).ms);
    const stopping = performance.now();
    await call({ action: "stop", name: SRC });
    const stopMs = performance.now() - stopping;
    const start = await timed({ action: "start", name: SRC }, "disk\n");
    cold.push(start.ms);
    stopStart.push(stopMs + start.ms);
  }
  for (const [what, said] of Object.entries(phases)) log(`${what}:\n  ${said.join("\n  ")}`);
  row(
    "rewind to a memory checkpoint, to its first preview byte, vs a cold start (median of 2)",
    median(fromMemory),
    median(cold),
    "ms",
    "<= 0.3",
    `from a running instance (it keeps its state first, then stops); resumes: ${restores.join(", ")}`,
  );
  row(
    "rewind to a disk checkpoint, to its first preview byte, vs a cold start (median of 2)",
    median(fromDisk),
    median(cold),
    "ms",
    "<= 1.0",
    `from a running instance (it keeps its state first, then stops); a stop then a start: ${median(stopStart).toFixed(0)} ms`,
  );
} finally {
  const list = await call({ action: "list" }).catch(() => ({ instances: [] }));
  for (const { name } of list.instances) await call({ action: "destroy", name, confirm: name }).catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
}

printRows();
