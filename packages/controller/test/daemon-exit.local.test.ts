// An exiting daemon removes its pid file and socket only while they are still its own. A destroy
// removes the entry's directory before its answer, so the client's next call (a create of the same
// name) spawns the next daemon while the last one is still winding down: that one used to delete
// the new daemon's socket and pid file, which left the new daemon unreachable and let the next
// call spawn a second owner of the entry.
import { readFile, rm, mkdtemp, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runDaemon } from "../src/daemon/server.js";
import { StateLayout } from "../src/state/layout.js";
import { createLocalRuntime } from "../src/testing.js";
import { untilAnswers } from "./support/in-process-daemon.js";

let dir: string;
let layout: StateLayout;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "ctl-exit-"));
  layout = new StateLayout(join(dir, "st"));
  await layout.ensurePrivate();
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

test("a daemon leaves a newer daemon's pid file and socket in place when it exits", async () => {
  const pidFile = layout.pidFile("instances", "x");
  const socket = layout.socketPath("instances", "x");
  const old = runDaemon(layout, "instances", "x", { runtime: createLocalRuntime(), idleExitMs: 500 });
  await untilAnswers(layout, "x", old);

  // The next daemon takes the entry while the old one is still running (its files were removed
  // under it, as a destroy removes the entry's directory).
  await rm(pidFile);
  await rm(socket);
  const next = createServer((conn) => conn.on("data", () => conn.end()));
  await new Promise<void>((resolve) => next.listen(socket, resolve));
  try {
    await writeFile(pidFile, `${process.pid}\n`);
    expect(await old).toBe(0); // idle with nothing running: it exits
    expect(await readFile(pidFile, "utf8")).toBe(`${process.pid}\n`);
    // Still a listening socket: opening it as a file fails with ENXIO, a missing one with ENOENT.
    await expect(readFile(socket)).rejects.toMatchObject({ code: "ENXIO" });
  } finally {
    next.close();
  }
});

test("a daemon removes its own pid file and socket when it exits", async () => {
  const pidFile = layout.pidFile("instances", "y");
  const socket = layout.socketPath("instances", "y");
  const daemon = runDaemon(layout, "instances", "y", { runtime: createLocalRuntime(), idleExitMs: 500 });
  await untilAnswers(layout, "y", daemon);
  expect(await daemon).toBe(0);
  await expect(readFile(pidFile)).rejects.toMatchObject({ code: "ENOENT" });
  await expect(readFile(socket)).rejects.toMatchObject({ code: "ENOENT" });
});
