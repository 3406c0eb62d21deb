// Which SSH accesses a guest closes when too many sit unused (guest-ssh.ts); ssh.vm.test.ts covers
// the keys and logins on a real guest.
import { idleAccessesBeyond, MAX_IDLE_SSH_ACCESSES } from "../src/guest-ssh.js";

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
