// What the dashboard remembers of who it let in: a used link until it would be refused as expired
// anyway (so the memory stays bounded), and a session until it goes unused for 8 hours.
import { SESSION_IDLE_MS, SessionTable, UsedLinks } from "../src/dashboard/sessions.js";
import { LINK_TTL_MS } from "../src/dashboard/tokens.js";

const start = Date.UTC(2026, 0, 1, 12);

test("a used link is remembered while it could still be accepted, and forgotten after it expired", () => {
  const clock = { ms: start };
  const used = new UsedLinks(() => clock.ms);
  used.add("a", start);
  clock.ms = start + LINK_TTL_MS;
  used.add("b", clock.ms);
  expect(used.has("a")).toBe(true);
  // Past its expiry (and the minute kept for a clock step back), the next use sweeps it out.
  clock.ms = start + LINK_TTL_MS + 60_000 + 1;
  used.add("c", clock.ms);
  expect([used.has("a"), used.has("b"), used.has("c")]).toEqual([false, true, true]);
});

test("a session ends after 8 hours without a request, unless a stream of it is open", () => {
  const clock = { ms: start };
  const sessions = new SessionTable(() => clock.ms);
  const id = sessions.create();
  expect(sessions.has(id)).toBe(true);
  expect(sessions.has("forged")).toBe(false);
  const release = sessions.holdStream(id);
  clock.ms += 3 * SESSION_IDLE_MS;
  expect(sessions.has(id)).toBe(true);
  release();
  clock.ms += SESSION_IDLE_MS;
  expect(sessions.has(id)).toBe(true);
  clock.ms += 1;
  expect(sessions.has(id)).toBe(false);
  expect(SESSION_IDLE_MS).toBe(8 * 3_600_000);
});
