// SSH into a real guest: the printed command checks the guest's host key strictly against the
// known_hosts file it names, every call gets a key of its own that works until its access closes,
// and the forwarder (with its key files) goes after its idle timeout with no session open, or
// when the VM closes. The boot is a microvm (what Linux hosts with KVM get; forced here under TCG),
// which also checks its transfer disk on virtio-mmio. One boot, ~30 s under TCG.
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { DiskStore, startVm, type GuestSshAccess, type RunningVm } from "../src/index.js";
import { refused, tempDir } from "./support/helpers.js";
import { sh, testImage, vmOptions } from "./support/vm-support.js";

let root: string;
let cleanup: () => Promise<void>;
let vm: RunningVm | undefined;

beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir("pisb-vmssh-"));
  const stateRoot = path.join(root, "state");
  const diskDir = path.join(root, "disk");
  await new DiskStore({ stateRoot }).createDisk(diskDir, { image: testImage(), diskGiB: 2 });
  vm = await startVm(vmOptions("ssh", diskDir, stateRoot, { machineType: "microvm" }));
});

afterAll(async () => {
  await vm?.close();
  await cleanup();
});

/** Runs the printed command with `remote` appended, non-interactively; resolves with its status and output. */
function runSsh(command: string, remote: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const [program, ...args] = command.split(" ");
  const child = spawn(program!, ["-o", "BatchMode=yes", "-o", "ConnectTimeout=60", ...args, remote], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const timer = setTimeout(() => child.kill("SIGKILL"), 120_000);
  return new Promise((resolve) =>
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
}

function option(command: string, name: string): string {
  const match = new RegExp(`-o ${name}=(\\S+)`).exec(command);
  if (!match) throw new Error(`${name} missing from ${command}`);
  return match[1]!;
}

/** The private key file the command names (`-i <file>`). */
function identityFile(command: string): string {
  const match = / -i (\S+) /.exec(command);
  if (!match) throw new Error(`-i missing from ${command}`);
  return match[1]!;
}

async function until(check: () => Promise<boolean> | boolean, ms: number, state = () => ""): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${ms} ms ${state()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("the printed command pins the guest's host key and runs with strict checking", async () => {
  const access = await vm!.enableSsh({ idleTimeoutMs: 120_000 });
  const knownHosts = option(access.command, "UserKnownHostsFile");
  expect(access.command).toMatch(/^ssh -p \d+ .* root@127\.0\.0\.1$/);
  expect(option(access.command, "StrictHostKeyChecking")).toBe("yes");
  const pinned = fs.readFileSync(knownHosts, "utf8");
  expect(pinned).toMatch(new RegExp(`^\\[127\\.0\\.0\\.1\\]:${access.port} ssh-ed25519 [A-Za-z0-9+/]+=*$`, "m"));

  const ok = await runSsh(access.command, "true");
  expect({ code: ok.code, stderr: ok.stderr }).toEqual({ code: 0, stderr: "" });

  // A different key pinned for this port: ssh refuses to talk (the check is really strict).
  const other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHrm0vLr6lDcgq9l6R1x3bE8bqX4dOMwzvS5bmDRJ8Hl";
  fs.writeFileSync(knownHosts, `[127.0.0.1]:${access.port} ${other}\n`);
  const mismatch = await runSsh(access.command, "true");
  expect(mismatch.code).not.toBe(0);
  expect(mismatch.stderr).toMatch(/HOST IDENTIFICATION HAS CHANGED|Host key verification failed/);
  fs.writeFileSync(knownHosts, pinned);

  await access.close();
  expect(await refused(access.port)).toBe(true);
  expect(fs.existsSync(path.dirname(knownHosts))).toBe(false);
});

test("every call gives a new key; both log in, and a closed access's key no longer does", async () => {
  const first = await vm!.enableSsh({ idleTimeoutMs: 120_000 });
  const second = await vm!.enableSsh({ idleTimeoutMs: 120_000 });
  const firstKey = fs.readFileSync(identityFile(first.command));
  expect(fs.readFileSync(identityFile(second.command)).equals(firstKey)).toBe(false);
  expect(second.port).not.toBe(first.port);
  for (const access of [first, second]) {
    const login = await runSsh(access.command, "echo in");
    expect({ code: login.code, stdout: login.stdout }).toEqual({ code: 0, stdout: "in\n" });
  }

  // The first key, kept past its access's close, is refused by sshd (tried through the second
  // forwarder, which is still open), and the second key still logs in.
  const kept = path.join(root, "kept_key");
  fs.writeFileSync(kept, firstKey, { mode: 0o600 });
  await first.close();
  const withKept = second.command.replace(identityFile(second.command), kept);
  // The removal runs after the close; wait until it is done rather than for a fixed time.
  await until(async () => (await runSsh(withKept, "true")).code !== 0, 30_000);
  const denied = await runSsh(withKept, "true");
  expect(denied.stderr).toMatch(/Permission denied/);
  expect((await runSsh(second.command, "true")).code).toBe(0);
  await second.close();
});

test("on microvm the root stays vda and the transfer disk is vdb: bytes cross its file both ways", async () => {
  expect(vm!.accelerator.machineType).toBe("microvm");
  const disk = vm!.transferDisk!;
  expect(disk).toMatchObject({ sizeBytes: 64 * 1024 * 1024, serial: "pisb-transfer" });
  const devices = await sh(
    vm!,
    'for d in /sys/block/vd*; do echo "${d##*/} $(cat $d/serial)"; done; findmnt -no SOURCE /',
  );
  expect(devices).toBe("vda \nvdb pisb-transfer\n/dev/vda\n");
  const sha256 = (bytes: Buffer) => createHash("sha256").update(bytes).digest("hex");
  const MiB = 1024 * 1024;
  // In: the host writes the file at 8 MiB, the guest reads the drive there (past its page cache).
  const into = randomBytes(4 * MiB);
  const handle = await fs.promises.open(disk.path, "r+");
  try {
    await handle.write(into, 0, into.length, 8 * MiB);
    const read = await sh(vm!, "dd if=/dev/vdb bs=1M skip=8 count=4 iflag=direct status=none | sha256sum");
    expect(read.split(" ")[0]).toBe(sha256(into));
    // Out: the guest writes the drive at 16 MiB and flushes, the host reads the file there.
    const wrote = await sh(
      vm!,
      "head -c 4M /dev/urandom > /tmp/out && dd if=/tmp/out of=/dev/vdb bs=1M seek=16 oflag=direct conv=fsync status=none && sha256sum < /tmp/out",
    );
    const out = Buffer.alloc(4 * MiB);
    await handle.read(out, 0, out.length, 16 * MiB);
    expect(sha256(out)).toBe(wrote.split(" ")[0]);
  } finally {
    await handle.close();
  }
});

test("the forwarder and its key files go after the idle timeout, not during a session", async () => {
  const idleTimeoutMs = 5_000;
  const access: GuestSshAccess = await vm!.enableSsh({ idleTimeoutMs });
  const keyDir = path.dirname(option(access.command, "UserKnownHostsFile"));
  // A session that outlasts the timeout keeps the forwarder up.
  const long = await runSsh(access.command, `sleep ${(idleTimeoutMs * 2) / 1000}; echo done`);
  expect({ code: long.code, stdout: long.stdout }).toEqual({ code: 0, stdout: "done\n" });
  const ended = Date.now();
  // Watch the key files, not the port: a probe connection would itself count as a session.
  const forwarder = access as GuestSshAccess & { sessionCount: number; closed: boolean };
  await until(
    () => !fs.existsSync(keyDir),
    idleTimeoutMs + 20_000,
    () => JSON.stringify({ sessions: forwarder.sessionCount, closed: forwarder.closed }),
  );
  expect(await refused(access.port)).toBe(true);
  expect(Date.now() - ended).toBeGreaterThanOrEqual(idleTimeoutMs - 500);

  // Asking again after that opens a fresh forwarder with a fresh key.
  const again = await vm!.enableSsh({ idleTimeoutMs });
  expect(again).not.toBe(access);
  expect((await runSsh(again.command, "true")).code).toBe(0);

  // Closing the VM closes the forwarder too.
  await vm!.close();
  vm = undefined;
  expect(await refused(again.port)).toBe(true);
});
