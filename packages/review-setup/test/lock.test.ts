// One refresh per instance at a time: a second one fails fast naming the holder, a dead holder's lock
// is taken over, and of many racing refreshes exactly one wins.
import { mkdtemp, readFile, rm, stat, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { acquireRefreshLock, defaultLockDir, refreshLockPath } from "../src/lock.js";

let dir: string;
let file: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "review-lock-"));
  file = refreshLockPath(join(dir, "locks"), "rev");
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const info = { instance: "rev", repo: "/src/checkout", now: Date.UTC(2026, 0, 2, 3, 4, 5) };

test("the lock lives under the state root, one file per instance", () => {
  expect(defaultLockDir({ PI_SANDBOX_HOME: "/state" })).toBe("/state/review-setup");
  expect(refreshLockPath("/state/review-setup", "web-2")).toBe("/state/review-setup/web-2.lock");
});

test("a second acquisition fails fast naming the holder; after release it succeeds", async () => {
  const release = await acquireRefreshLock(file, info, { pid: 4242, hostname: "hosta" });
  expect((await stat(file)).mode & 0o777).toBe(0o600);
  const error = await acquireRefreshLock(
    file,
    { ...info, repo: "/other" },
    { hostname: "hosta", isAlive: () => true },
  ).catch((e: unknown) => e);
  expect(error).toMatchObject({
    code: "REVIEW_SETUP_BUSY",
    message:
      "instance rev is already being refreshed by pid 4242 on hosta, started 2026-01-02T03:04:05.000Z, snapshotting /src/checkout",
    details: { lockPath: file, holder: { pid: 4242, hostname: "hosta", repo: "/src/checkout" } },
  });
  await release();
  await release(); // idempotent
  const again = await acquireRefreshLock(file, info);
  await again();
});

test("a lock whose holder died on this host is taken over", async () => {
  await acquireRefreshLock(file, info, { pid: 999_999, hostname: "hosta" });
  const release = await acquireRefreshLock(file, info, {
    pid: 7,
    hostname: "hosta",
    isAlive: (pid) => pid !== 999_999,
  });
  expect(JSON.parse(await readFile(file, "utf8"))).toMatchObject({ pid: 7 });
  await release();
});

test("a dead pid recorded by another host is not judged here: still busy", async () => {
  await acquireRefreshLock(file, info, { pid: 999_999, hostname: "elsewhere" });
  await expect(acquireRefreshLock(file, info, { hostname: "hosta", isAlive: () => false })).rejects.toMatchObject({
    code: "REVIEW_SETUP_BUSY",
    hint: expect.stringContaining(`delete ${file}`),
  });
});

test("a stale holder's release does not remove the lock that replaced it", async () => {
  const stale = await acquireRefreshLock(file, info, { pid: 999_999, hostname: "hosta" });
  const fresh = await acquireRefreshLock(file, info, { pid: 8, hostname: "hosta", isAlive: (pid) => pid === 8 });
  await stale();
  expect(JSON.parse(await readFile(file, "utf8"))).toMatchObject({ pid: 8 });
  await fresh();
  await expect(stat(file)).rejects.toMatchObject({ code: "ENOENT" });
});

test("an unreadable lock is busy while young and taken over once old", async () => {
  await acquireRefreshLock(file, info); // creates the directory
  await writeFile(file, "{ half-writ");
  await expect(acquireRefreshLock(file, info)).rejects.toMatchObject({
    code: "REVIEW_SETUP_BUSY",
    message: "instance rev is already being refreshed by a refresh that is just starting",
  });
  const old = new Date(Date.now() - 60_000);
  await utimes(file, old, old);
  const release = await acquireRefreshLock(file, info);
  expect(JSON.parse(await readFile(file, "utf8"))).toMatchObject({ pid: process.pid, instance: "rev" });
  await release();
});

test("of many simultaneous acquisitions exactly one wins", async () => {
  const results = await Promise.allSettled(Array.from({ length: 8 }, () => acquireRefreshLock(file, info)));
  expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
  for (const r of results) if (r.status === "rejected") expect(r.reason).toMatchObject({ code: "REVIEW_SETUP_BUSY" });
});
