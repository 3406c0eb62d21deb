// How QEMU is confined on a real boot: QEMU's seccomp sandbox, no_new_privs, no core dumps, its
// run directory (private, with its sockets) as working directory; the KVM probe's command line
// through the same wrapper; and a host whose QEMU lacks seccomp support, where the VM still boots
// and says so. Two boots.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { DiskStore, prepareQemuLauncher, probeKvmKernel, startVm, type RunningVm } from "../src/index.js";
import { qemuWithoutSeccomp, tempDir } from "./support/helpers.js";
import { sh, testImage, vmOptions } from "./support/vm-support.js";

let root: string;
let cleanup: () => Promise<void>;
const running = new Set<RunningVm>();

beforeAll(async () => ({ dir: root, cleanup } = await tempDir("pisb-confine-")));
afterAll(async () => {
  await Promise.allSettled([...running].map((vm) => vm.close()));
  await cleanup();
});

async function boot(name: string): Promise<{ vm: RunningVm; stateRoot: string }> {
  const stateRoot = path.join(root, `${name}-state`);
  const diskDir = path.join(root, `${name}-disk`);
  await new DiskStore({ stateRoot }).createDisk(diskDir, { image: testImage(), diskGiB: 2 });
  const vm = await startVm(vmOptions(name, diskDir, stateRoot));
  running.add(vm);
  return { vm, stateRoot };
}

function procStatus(pid: number): string {
  return fs.readFileSync(`/proc/${pid}/status`, "utf8");
}

test("the VM's QEMU runs under seccomp, with no_new_privs, no core dumps, in its run directory", async () => {
  const { vm, stateRoot } = await boot("confined");
  const pid = vm.hostPid!;
  expect(pid).toBeGreaterThan(0);
  expect(fs.readFileSync(`/proc/${pid}/cmdline`, "utf8")).toContain("qemu-system-");
  // 2 = SECCOMP_MODE_FILTER.
  expect(procStatus(pid)).toMatch(/^Seccomp:\t2$/m);
  expect(procStatus(pid)).toMatch(/^NoNewPrivs:\t1$/m);
  expect(fs.readFileSync(`/proc/${pid}/limits`, "utf8")).toMatch(/^Max core file size\s+0\s+0\s/m);
  // The working directory is the VM's run directory, the one that holds its sockets.
  const cwd = fs.readlinkSync(`/proc/${pid}/cwd`);
  expect(fs.readdirSync(cwd)).toEqual(expect.arrayContaining(["ctl.sock", "net.sock", "qmp.sock"]));
  expect(cwd.startsWith(stateRoot) || cwd.startsWith(os.tmpdir())).toBe(true);
  // Whoever could write there could put a socket in QEMU's or Gondolin's place: ours, 0700, no link.
  const dir = fs.lstatSync(cwd);
  expect({ directory: dir.isDirectory(), uid: dir.uid, mode: (dir.mode & 0o777).toString(8) }).toEqual({
    directory: true,
    uid: process.getuid!(),
    mode: "700",
  });
  expect(vm.warnings.join("\n")).not.toMatch(/seccomp/);
  // Gondolin's channels all work under the filter: exec, files, and a checkpointing stop.
  expect(await sh(vm, "echo confined")).toBe("confined\n");
  await vm.writeFile("/root/note.txt", "kept");
  expect(String(await vm.readFile("/root/note.txt"))).toBe("kept");
  await vm.stop();
  running.delete(vm);
});

test("the KVM probe's command line runs through the sandboxed wrapper (checked on TCG)", async () => {
  const launcher = await prepareQemuLauncher(path.join(root, "probe-bin"));
  expect(launcher.seccomp).toBe(true);
  const verdict = await probeKvmKernel({
    qemuPath: launcher.qemuPath,
    kernelPath: path.join(testImage(), "vmlinuz-virt"),
    machineType: "q35",
    cpu: "max",
    accel: "tcg",
    timeoutMs: 60_000,
  });
  expect(verdict).toMatchObject({ usable: true });
});

test("a QEMU without seccomp support still boots the VM, and the warning says why", async () => {
  const fakeBin = await qemuWithoutSeccomp(root);
  const previous = process.env.PATH;
  process.env.PATH = `${fakeBin}${path.delimiter}${previous}`;
  let vm: RunningVm;
  try {
    ({ vm } = await boot("unconfined"));
  } finally {
    process.env.PATH = previous;
  }
  expect(vm.warnings).toContainEqual(
    expect.stringMatching(/^QEMU runs without its seccomp sandbox \(-sandbox: There is no option group 'sandbox'\)/),
  );
  expect(procStatus(vm.hostPid!)).toMatch(/^Seccomp:\t0$/m);
  expect(procStatus(vm.hostPid!)).toMatch(/^NoNewPrivs:\t1$/m);
  expect(await sh(vm, "echo still-boots")).toBe("still-boots\n");
});
