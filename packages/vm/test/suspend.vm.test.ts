// suspend() keeps the guest's memory next to its disk checkpoint, and the next startVm resumes
// it: a background process keeps its pid, a guest server answers the same on the same port, the
// FUSE mount (/etc/gondolin) still reads, the clock is set. Without its memory file the same
// checkpoint boots cold, and `restore` says why; so does a memory file QEMU refuses. One disk,
// four starts (~2 min on an idle TCG host).
import fs from "node:fs";
import path from "node:path";
import type { Duplex } from "node:stream";
import { DiskStore, MEMORY_FILE, SUSPEND_STATE_FILE, startVm, type RunningVm } from "../src/index.js";
import { tempDir } from "./support/helpers.js";
import { sh, testImage, vmOptions } from "./support/vm-support.js";

const PORT = 8123;
const SERVER = `cd /home/www && setsid nohup python3 -m http.server ${PORT} --bind 127.0.0.1 >/dev/null 2>&1 &`;

async function httpGet(vm: RunningVm, port: number): Promise<string> {
  const stream: Duplex = await vm.connectTcp(port, { timeoutMs: 30_000 });
  stream.end(`GET /index.html HTTP/1.0\r\nHost: localhost\r\n\r\n`);
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  const text = Buffer.concat(chunks).toString("utf8");
  return text.slice(text.indexOf("\r\n\r\n") + 4);
}

describe("suspend and resume (real VM)", () => {
  let cleanup: () => Promise<void>;
  let stateRoot: string;
  let diskDir: string;
  let store: DiskStore;
  let vm: RunningVm | undefined;

  beforeAll(async () => {
    const temp = await tempDir("pisb-susp-");
    cleanup = temp.cleanup;
    stateRoot = path.join(temp.dir, "st");
    diskDir = path.join(temp.dir, "disk");
    store = new DiskStore({ stateRoot });
    await store.createDisk(diskDir, { image: testImage(), diskGiB: 4 });
  });

  afterAll(async () => {
    await vm?.close().catch(() => undefined);
    await cleanup();
  });

  test("processes, a guest server and unsynced files survive; the memory file is deleted on start", async () => {
    vm = await startVm(vmOptions("susp", diskDir, stateRoot, { diskStore: store }));
    expect(vm.restore).toBeUndefined();
    const sleeper = (await sh(vm, "setsid nohup sleep 1000 >/dev/null 2>&1 & echo $!")).trim();
    await sh(
      vm,
      `mkdir -p /home/www && echo "served $(date +%s%N)" > /home/www/index.html && echo kept > /home/www/unsynced`,
    );
    await sh(vm, SERVER);
    // Python starts slowly on a loaded TCG host.
    let body = "";
    for (const deadline = Date.now() + 120_000; body === "" && Date.now() < deadline;) {
      body = await httpGet(vm, PORT).catch(() => "");
      if (body === "") await new Promise((resolve) => setTimeout(resolve, 200));
    }
    expect(body).toMatch(/^served \d+\n$/);

    const suspended = await vm.suspend();
    expect(suspended.memoryBytes).toBeGreaterThan(1024 * 1024);
    // Only touched pages are written: far less than the guest's 1 GiB.
    expect(suspended.memoryBytes).toBeLessThan(1024 ** 3);
    expect(fs.existsSync(path.join(diskDir, MEMORY_FILE))).toBe(true);
    expect((await store.inspect(diskDir)).memoryBytes).toBeGreaterThan(1024 * 1024);

    vm = await startVm(vmOptions("susp", diskDir, stateRoot, { diskStore: store }));
    expect(vm.restore).toEqual({ warm: true, restoreMs: expect.any(Number) });
    expect(fs.existsSync(path.join(diskDir, MEMORY_FILE))).toBe(false);
    expect(fs.existsSync(path.join(diskDir, SUSPEND_STATE_FILE))).toBe(false);
    expect((await store.inspect(diskDir)).memoryBytes).toBe(0);
    expect((await sh(vm, `cat /proc/${sleeper}/cmdline | tr '\\0' ' '`)).trim()).toBe("sleep 1000");
    expect(await httpGet(vm, PORT)).toBe(body);
    expect(await sh(vm, "cat /home/www/unsynced; ls /etc/gondolin >/dev/null && echo vfs-ok")).toBe("kept\nvfs-ok\n");
    const guestNow = Number((await sh(vm, "date +%s")).trim());
    expect(Math.abs(guestNow - Date.now() / 1000)).toBeLessThan(60);
    // The thawed filesystem takes writes, and a stop after a resume checkpoints them.
    await sh(vm, "echo after > /home/www/after");
  });

  test("a memory checkpoint of a guest rewriting 128 MiB in a loop ends, and the guest runs on", async () => {
    const running = vm!;
    const dirtier = (
      await sh(
        running,
        [
          "cat > /home/www/dirty.py <<'PY'",
          "b = bytearray(128 << 20)",
          "n = 0",
          "while True:",
          "    for i in range(0, len(b), 4096):",
          "        b[i] = (b[i] + 1) & 255",
          "    n += 1",
          "    with open('/home/www/passes', 'w') as f:",
          "        f.write(str(n))",
          "PY",
          "setsid nohup python3 /home/www/dirty.py >/dev/null 2>&1 & echo $!",
        ].join("\n"),
      )
    ).trim();
    const passes = async () => Number((await sh(running, "cat /home/www/passes 2>/dev/null || echo 0")).trim());
    for (const deadline = Date.now() + 60_000; (await passes()) < 1 && Date.now() < deadline;) {
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    const before = await passes();
    expect(before).toBeGreaterThanOrEqual(1);
    const started = Date.now();
    const taken = await running.checkpoint({ keep: { memory: true, label: "busy" } });
    const tookMs = Date.now() - started;
    // Before, the copy never caught up and the save failed after 300 s; now QEMU slows the vCPU
    // down, and on a host too busy even for that pauses it longer for the rest.
    expect(tookMs).toBeLessThan(120_000);
    expect(taken.memoryBytes).toBeGreaterThan(128 * 1024 ** 2);
    // The guest runs on: the loop goes on passing over its buffer.
    const after = await passes();
    for (const deadline = Date.now() + 30_000; (await passes()) === after && Date.now() < deadline;) {
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    expect(await passes()).toBeGreaterThan(after);
    await sh(running, `kill ${dirtier}`);
    await store.removeCheckpoint(diskDir, taken.kept!.id);
    console.log(`busy guest's memory checkpoint: ${tookMs} ms, paused ${Math.round(taken.pauseMs ?? 0)} ms`);
  });

  test("without its memory file the same checkpoint boots cold and says why", async () => {
    await vm!.suspend();
    fs.rmSync(path.join(diskDir, MEMORY_FILE));
    const progress: string[] = [];
    vm = await startVm(
      vmOptions("susp", diskDir, stateRoot, { diskStore: store, onProgress: (m) => progress.push(m) }),
    );
    expect(vm.restore).toEqual({ warm: false, reason: "the memory file is missing" });
    expect(progress.join("\n")).toContain("the memory file is missing");
    expect(await sh(vm, "cat /home/www/unsynced /home/www/after; pgrep -x sleep || echo no-sleep")).toBe(
      "kept\nafter\nno-sleep\n",
    );
    expect(fs.existsSync(path.join(diskDir, SUSPEND_STATE_FILE))).toBe(false);
  });

  test("a memory file QEMU refuses gives a cold boot with QEMU's reason; destroy leaves no file", async () => {
    await vm!.suspend();
    // The stream's header (magic and version) overwritten: same size, so only QEMU can tell.
    const handle = fs.openSync(path.join(diskDir, MEMORY_FILE), "r+");
    fs.writeSync(handle, Buffer.alloc(16, 0x5a), 0, 16, 0);
    fs.closeSync(handle);
    vm = await startVm(vmOptions("susp", diskDir, stateRoot, { diskStore: store }));
    expect(vm.restore).toMatchObject({ warm: false, reason: expect.stringMatching(/^QEMU could not resume it: /) });
    expect(await sh(vm, "cat /home/www/after")).toBe("after\n");
    await vm.suspend();
    vm = undefined;
    expect(fs.existsSync(path.join(diskDir, MEMORY_FILE))).toBe(true);
    await store.destroy(diskDir);
    expect(fs.existsSync(diskDir)).toBe(false);
  });
});
