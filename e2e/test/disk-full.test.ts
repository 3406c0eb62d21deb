// The host disk under the state root (a small loop-mounted ext4) fills up (issue #10).
// 1. Nearly full at stop: the run's data is already in its own layer, so the checkpoint needs no
//    headroom: stop completes, and the next start (after space is freed) reopens it with both the
//    old and the new files.
// 2. Full while the guest writes, on the instance 1 left running: QEMU pauses the guest. Nothing
//    hangs: the exec and the stop fail fast with VM_HOST_DISK_FULL naming the full file system,
//    the previous checkpoint stays current (pointer unchanged, `qemu-img check` clean), no QEMU is
//    left, and a start after space is freed reopens that checkpoint.
// The vm package's host-disk-full.vm.test.ts covers the same below the controller; here it is the
// user's view through the client: the errors' codes and details, inspect, and the daemons.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, rm, statfs, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { makeSandbox, qemuGone, sleep, teardown, type Sandbox } from "@pi-sandbox/controller/testing";

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
  // Left running: the next test fills the host under this run.
}, 480_000);

test("the host fills while the guest writes: exec and stop fail fast with VM_HOST_DISK_FULL; the old checkpoint reopens", async () => {
  const box = sandbox!;
  const disk = join(box.home, "instances", "full", "disk");
  const pointer = () => readFileSync(join(disk, "disk.json"), "utf8");
  // The previous test's last start left "full" running on its checkpoint (the marker and the
  // 300 MiB file); only a checkpoint moves the pointer, never a start.
  expect((await box.call({ action: "inspect", name: "full" })).state).toBe("running");
  const checkpoint = pointer();

  const filler = join(mnt, "filler");
  await writeFile(filler, Buffer.alloc(0));
  execFileSync("fallocate", ["-l", String((await freeBytes(mnt)) - 20 * MiB), filler]);
  const expectDiskFull = async (work: Promise<unknown>, withinMs: number, label: string) => {
    const t0 = Date.now();
    const outcome = await work.then(
      (v) => ({ ok: true as const, v }),
      (e: { code?: string; message?: string; details?: Record<string, unknown> }) => ({ ok: false as const, e }),
    );
    const took = Date.now() - t0;
    process.stderr.write(
      `disk-full: ${label} after ${(took / 1000).toFixed(1)} s -> ${JSON.stringify(outcome).slice(0, 600)}\n`,
    );
    expect(outcome.ok).toBe(false);
    const error = (outcome as { e: { code?: string; message?: string; details?: Record<string, unknown> } }).e;
    expect(error.code).toBe("VM_HOST_DISK_FULL");
    expect(error.message).toMatch(new RegExp(`host file system ${mnt} (is full|ran out of space)`));
    expect(error.details).toMatchObject({ mountPoint: mnt });
    expect(took).toBeLessThan(withinMs);
    return error;
  };

  // 100 MiB into a host file system with 20 MiB left: QEMU pauses the guest mid-write.
  await expectDiskFull(
    box.call({
      action: "exec",
      name: "full",
      cmd: "dd if=/dev/zero of=/workspace/late bs=1M count=100 conv=fsync",
      timeoutMs: 60_000,
    }),
    100_000,
    "exec",
  );
  // Further guest actions do not wait for the paused guest either.
  await expectDiskFull(box.call({ action: "exec", name: "full", cmd: "true" }), 5_000, "second exec");

  const stopped = await expectDiskFull(box.call({ action: "stop", name: "full" }), 60_000, "stop");
  expect(stopped.message).toMatch(/previous checkpoint is still current/);
  expect(await qemuGone(disk)).toEqual([]);
  expect(pointer()).toBe(checkpoint);
  const layers = (JSON.parse(checkpoint) as { layers: string[] }).layers;
  for (const layer of layers) execFileSync("qemu-img", ["check", "-q", "-f", "qcow2", join(disk, layer)]);
  const view = await box.call({ action: "inspect", name: "full" });
  expect((view.errors as { code: string }[]).map((e) => e.code)).toContain("VM_HOST_DISK_FULL");

  await rm(filler);
  expect((await box.call({ action: "start", name: "full" })).state).toBe("running");
  expect((await box.call({ action: "read", name: "full", path: "/workspace/marker.txt" })).content).toBe(
    "checkpoint one\n",
  );
  const late = await box.call({
    action: "exec",
    name: "full",
    cmd: "test -e /workspace/late && echo late || echo none; stat -c %s /workspace/big",
  });
  expect(late.output).toBe(`none\n${300 * MiB}\n`);
  expect((await box.call({ action: "stop", name: "full" })).state).toBe("stopped");
}, 420_000);
