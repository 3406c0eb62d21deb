// Which SSH accesses a guest closes when too many sit unused, and how a slow guest's sshd is waited
// for (guest-ssh.ts); ssh.vm.test.ts covers the keys and logins on a real guest.
import { PassThrough } from "node:stream";
import { awaitSshBanner, idleAccessesBeyond, MAX_IDLE_SSH_ACCESSES } from "../src/guest-ssh.js";

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
