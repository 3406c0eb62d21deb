// Host disk nearly full at stop: the state root lives on a small loop-mounted ext4. The run's data
// is already in its own layer, so the checkpoint needs no headroom: stop completes, and the next
// start (after space is freed) reopens it with both the old and the new files. (A host that fills
// up *while* the guest writes freezes the guest instead; that is reported as a product bug.)
import { execFileSync } from "node:child_process";
import { mkdtemp, rm, statfs, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { makeSandbox, qemuGone, sleep, teardown, type Sandbox } from "./support/product.js";

const MiB = 1024 * 1024;
let outer: string;
let mnt: string;
let sandbox: Sandbox | undefined;

beforeAll(async () => {
  outer = await mkdtemp("/tmp/psd-");
  mnt = join(outer, "m");
  const img = join(outer, "fs.img");
  execFileSync("truncate", ["-s", "1200M", img]);
  execFileSync("mkfs.ext4", ["-q", "-F", img]);
  execFileSync("mkdir", ["-p", mnt]);
  execFileSync("mount", ["-o", "loop", img, mnt]);
  sandbox = await makeSandbox("s", mnt);
  await sandbox.writeConfig("profile: tiny\ndiskGiB: 4\n");
});

afterAll(async () => {
  const left = await teardown(sandbox, { keep: true });
  // Daemons give up their files a moment after stop; unmount only once they are gone.
  for (let i = 0; i < 100 && sandbox && daemonsOf(sandbox.home).length > 0; i++) await sleep(200);
  try {
    execFileSync("umount", [mnt]);
  } catch {
    execFileSync("umount", ["-l", mnt]);
  }
  await rm(outer, { recursive: true, force: true });
  expect(left).toEqual([]);
}, 300_000);

function daemonsOf(home: string): string[] {
  try {
    return execFileSync("pgrep", ["-f", `daemon/main.js --root ${home}`], { encoding: "utf8" })
      .split("\n")
      .filter(Boolean);
  } catch {
    return [];
  }
}

const freeBytes = async (dir: string) => {
  const s = await statfs(dir);
  return s.bavail * s.bsize;
};

test("stop with the host almost full still completes its checkpoint; start reopens it", async () => {
  const box = sandbox!;
  expect((await box.call({ action: "create", name: "full", config: "sandbox.yaml" })).state).toBe("running");
  await box.call({ action: "write", name: "full", path: "/workspace/marker.txt", content: "checkpoint one\n" });
  expect((await box.call({ action: "stop", name: "full" })).state).toBe("stopped");
  expect((await box.call({ action: "start", name: "full" })).state).toBe("running");

  // 300 MiB written in the run, then the host is filled to ~50 MiB free: the checkpoint must fold
  // the run's data into the instance's layer and cannot.
  const dd = await box.call({
    action: "exec",
    name: "full",
    cmd: "dd if=/dev/urandom of=/workspace/big bs=1M count=300 2>&1 | tail -1; sync; echo done",
    timeoutMs: 60_000,
  });
  expect(dd).toMatchObject({ running: false, exitCode: 0 });
  const filler = join(mnt, "filler");
  await writeFile(filler, Buffer.alloc(0));
  execFileSync("fallocate", ["-l", String((await freeBytes(mnt)) - 50 * MiB), filler]);

  const t0 = Date.now();
  const stop = await box.call({ action: "stop", name: "full" }).then(
    (v) => ({ ok: true as const, v }),
    (e: unknown) => ({ ok: false as const, e }),
  );
  process.stderr.write(
    `disk-full: stop after ${((Date.now() - t0) / 1000).toFixed(1)} s -> ${JSON.stringify(stop.ok ? stop.v : stop.e).slice(0, 800)}\n`,
  );
  expect(stop.ok).toBe(true);
  expect(stop.ok && stop.v.state).toBe("stopped");
  expect(await qemuGone(box.home)).toEqual([]);

  await rm(filler);
  await sleep(100);
  const reopened = await box.call({ action: "start", name: "full" });
  expect(reopened.state).toBe("running");
  expect((await box.call({ action: "read", name: "full", path: "/workspace/marker.txt" })).content).toBe(
    "checkpoint one\n",
  );
  const big = await box.call({ action: "exec", name: "full", cmd: "stat -c %s /workspace/big" });
  expect(big.output).toBe(`${300 * MiB}\n`);
  expect((await box.call({ action: "stop", name: "full" })).state).toBe("stopped");
}, 480_000);
