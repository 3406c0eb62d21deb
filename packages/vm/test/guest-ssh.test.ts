// Which SSH accesses a guest closes when too many sit unused, and how a slow guest's sshd is waited
// for (guest-ssh.ts), with a fake Gondolin VM and guest; ssh.vm.test.ts covers the keys and logins
// on a real guest.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { PassThrough } from "node:stream";
import type { VM } from "@earendil-works/gondolin";
import { VmError } from "../src/errors.js";
import { GuestFault } from "../src/guest/guest-fault.js";
import { awaitSshBanner, GuestSsh, idleAccessesBeyond, MAX_IDLE_SSH_ACCESSES } from "../src/guest/guest-ssh.js";
import type { GuestVm } from "../src/guest/guest-vm.js";

function access(name: string, sessionCount = 0, closed = false) {
  return { name, sessionCount, closed };
}

test("the oldest accesses without a session are closed once more than the limit sit unused", () => {
  const accesses = [access("a"), access("b", 1), access("c"), access("d", 0, true), access("e"), access("f")];
  // Idle and open: a, c, e, f; two may stay, so the two oldest go. b has a session, d is closed.
  expect(idleAccessesBeyond(accesses, 2).map((a) => a.name)).toEqual(["a", "c"]);
  expect(idleAccessesBeyond(accesses, 4)).toEqual([]);
});

test("a guest keeps a handful of unused accesses open, so a user's earlier commands still work", () => {
  const opened = Array.from({ length: MAX_IDLE_SSH_ACCESSES }, (_, i) => access(`a${i}`));
  expect(MAX_IDLE_SSH_ACCESSES).toBeGreaterThanOrEqual(8);
  expect(idleAccessesBeyond(opened, MAX_IDLE_SSH_ACCESSES)).toEqual([]);
  expect(idleAccessesBeyond([...opened, access("new")], MAX_IDLE_SSH_ACCESSES).map((a) => a.name)).toEqual(["a0"]);
});

describe("waiting for a slow guest's sshd", () => {
  /** A guest whose port 22 refuses `refusals` connections, then answers with `banner` after `delayMs` (never when null). */
  function guest(refusals: number, banner: string | null, delayMs = 50) {
    let connects = 0;
    const streams: PassThrough[] = [];
    return {
      streams,
      get connects() {
        return connects;
      },
      connectTcp: async (port: number) => {
        expect(port).toBe(22);
        connects += 1;
        if (connects <= refusals) throw new Error("connection refused");
        const stream = new PassThrough();
        streams.push(stream);
        if (banner !== null) setTimeout(() => stream.write(banner), delayMs);
        return stream;
      },
    };
  }

  test("resolves once port 22 answers with an SSH banner, after refusals, and closes its probes", async () => {
    const slow = guest(2, "SSH-2.0-OpenSSH_9.2\r\n");
    await awaitSshBanner(slow, 10_000);
    expect(slow.connects).toBe(3);
    expect(slow.streams.every((stream) => stream.destroyed)).toBe(true);
  });

  test("rejects with the last failure when no banner comes in time", async () => {
    await expect(awaitSshBanner(guest(0, null), 1_200)).rejects.toThrow(/ssh banner timeout/);
    await expect(awaitSshBanner(guest(0, "HTTP/1.1 400 Bad Request\r\n"), 1_200)).rejects.toThrow(
      /unexpected ssh banner/,
    );
    await expect(awaitSshBanner(guest(Infinity, null), 1_200)).rejects.toThrow(/connection refused/);
  });
});

describe("SSH into a guest whose sshd missed Gondolin's 10 s", () => {
  const KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOk4UoVqgHRvJbKQbJDMa4l0GZc7rf9Q3bAvCZGjOhRt";
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "pisb-guest-ssh-"));
    await writeFile(path.join(dir, "id"), "private key\n");
    await writeFile(path.join(dir, "id.pub"), `${KEY} gondolin\n`);
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  /** Gondolin's enableSsh failing `failures` times with its banner timeout, then succeeding. */
  function fakes(failures: number, banner: string | null) {
    const calls: string[] = [];
    const vm = {
      enableSsh: async () => {
        calls.push("enableSsh");
        if (calls.filter((call) => call === "enableSsh").length <= failures)
          throw new Error("ssh port-forward is not available: ssh banner timeout");
        return { identityFile: path.join(dir, "id"), close: async () => undefined };
      },
    } as unknown as VM;
    const guest = {
      connectTcp: async () => {
        calls.push("probe");
        const stream = new PassThrough();
        if (banner !== null) setTimeout(() => stream.write(banner), 10);
        return stream;
      },
      exec: () => {
        const stdout = new PassThrough();
        const stderr = new PassThrough();
        stdout.end(`${KEY} root@guest\n`);
        stderr.end();
        return { stdout, stderr, result: Promise.resolve({ exitCode: 0, signal: null }) };
      },
    } as unknown as GuestVm;
    const state = {
      fault: new GuestFault(),
      closed: () => false,
      closedError: () => new VmError("VM_CLOSED", "closed"),
    };
    return { calls, ssh: new GuestSsh(vm, guest, state) };
  }

  test("waits for the banner, runs Gondolin's setup again and opens the access", async () => {
    const { calls, ssh } = fakes(1, "SSH-2.0-OpenSSH_9.2\r\n");
    const access = await ssh.enable();
    try {
      expect(calls).toEqual(["enableSsh", "probe", "enableSsh"]);
      expect(access.command).toContain("ssh");
    } finally {
      await ssh.closeAll();
    }
  });

  test("a second miss is VM_SSH_FAILED with Gondolin's reason, not an uncoded error", async () => {
    const { calls, ssh } = fakes(2, "SSH-2.0-OpenSSH_9.2\r\n");
    await expect(ssh.enable()).rejects.toMatchObject({
      code: "VM_SSH_FAILED",
      message: expect.stringContaining("ssh port-forward is not available"),
    });
    expect(calls).toEqual(["enableSsh", "probe", "enableSsh"]);
  });
});
