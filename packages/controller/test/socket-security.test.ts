// Daemon sockets live only in directories the user owns, are created 0600, and a client sends
// nothing to a socket another user could have put there. Cases that need a file owned by someone
// else use chown to uid 65534 (nobody), which needs root.
import { existsSync } from "node:fs";
import { chmod, chown, lchown, lstat, mkdir, mkdtemp, readdir, readFile, rm, symlink } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { callDaemon } from "../src/client/connection.js";
import { ensureDaemon } from "../src/client/spawn.js";
import { runDaemon } from "../src/daemon/server.js";
import { StateLayout } from "../src/state/layout.js";
import { pidAlive, readPidFile } from "../src/state/liveness.js";

const OTHER_UID = 65534;
const asRoot = process.getuid?.() === 0 ? test : test.skip;

let base: string;
let tmp: string;

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), "ctl-sock-"));
  tmp = join(base, "tmp");
  await mkdir(tmp, { mode: 0o700 });
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

/** A layout whose socket path is too long for the entry dir, so it falls back to `<tmp>/pi-sandbox-<uid>/`. */
function longLayout(): StateLayout {
  return new StateLayout(join(base, "s".repeat(90)), { tmpDir: tmp });
}

function fallbackDir(layout: StateLayout): string {
  const dir = dirname(layout.socketPath("instances", "demo"));
  expect(dir).toBe(join(tmp, `pi-sandbox-${process.getuid!()}`));
  return dir;
}

describe("the daemon's socket directory", () => {
  asRoot("a fallback directory another user created first is refused", async () => {
    const layout = longLayout();
    const dir = fallbackDir(layout);
    await mkdir(dir, { mode: 0o700 });
    await chown(dir, OTHER_UID, OTHER_UID);
    await expect(runDaemon(layout, "instances", "demo")).rejects.toMatchObject({
      code: "CONTROLLER_STATE_INSECURE",
      message: expect.stringContaining(`belongs to uid ${OTHER_UID}`),
      hint: expect.stringContaining("PI_SANDBOX_HOME"),
    });
    expect(await readdir(dir)).toEqual([]);
    expect(existsSync(layout.pidFile("instances", "demo"))).toBe(false);
    expect(await readFile(layout.logFile("instances", "demo"), "utf8")).toContain("CONTROLLER_STATE_INSECURE");
  });

  test("a fallback directory with mode 0755 is refused with the chmod fix", async () => {
    const layout = longLayout();
    const dir = fallbackDir(layout);
    await mkdir(dir);
    await chmod(dir, 0o755);
    await expect(runDaemon(layout, "instances", "demo")).rejects.toMatchObject({
      code: "CONTROLLER_STATE_INSECURE",
      hint: `Run: chmod 700 ${dir}`,
    });
    expect(await readdir(dir)).toEqual([]);
    expect(existsSync(layout.pidFile("instances", "demo"))).toBe(false);
  });

  test("a fallback path that is a symlink is refused, not followed, even to a private directory of ours", async () => {
    const layout = longLayout();
    const dir = fallbackDir(layout);
    const target = join(base, "elsewhere");
    await mkdir(target, { mode: 0o700 });
    await symlink(target, dir);
    await expect(runDaemon(layout, "instances", "demo")).rejects.toMatchObject({
      code: "CONTROLLER_STATE_INSECURE",
      message: expect.stringContaining("symbolic link"),
    });
    expect(await readdir(target)).toEqual([]);
  });

  test.each([
    ["in the entry directory", () => new StateLayout(join(base, "state"), { tmpDir: tmp })],
    ["in the temp-dir fallback", longLayout],
  ])("the socket is 0600 in a 0700 directory (%s)", async (_label, makeLayout) => {
    const layout = makeLayout();
    const env = { ...process.env, TMPDIR: tmp, PI_SANDBOX_HOME: layout.root };
    await layout.ensurePrivate();
    await ensureDaemon(layout, "instances", "demo", { env });
    const socketPath = layout.socketPath("instances", "demo");
    try {
      const socket = await lstat(socketPath);
      const dir = await lstat(dirname(socketPath));
      expect({ socket: (socket.mode & 0o777).toString(8), dir: (dir.mode & 0o777).toString(8) }).toEqual({
        socket: "600",
        dir: "700",
      });
      expect(socket.isSocket() && dir.isDirectory() && !dir.isSymbolicLink()).toBe(true);
      // Our own daemon passes the client's check and answers (here: nothing to stop).
      await expect(callDaemon(socketPath, { action: "inspect", name: "demo" })).rejects.toMatchObject({
        code: expect.stringMatching(/^CONTROLLER_/),
      });
    } finally {
      await stopDaemon(layout);
    }
  });
});

describe("the client checks the listener before sending", () => {
  let server: Server | undefined;

  afterEach(async () => {
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    server = undefined;
  });

  /** A stand-in daemon in `dir` that records what it receives and may speak first. */
  async function impostor(dir: string, options: { speakFirst?: boolean } = {}) {
    const socketPath = join(dir, "daemon.sock");
    const received: Buffer[] = [];
    server = createServer((socket) => {
      socket.on("data", (chunk: Buffer) => {
        received.push(chunk);
        socket.write(`${JSON.stringify({ id: 1, type: "result", result: "answered" })}\n`);
      });
      socket.on("error", () => undefined);
      if (options.speakFirst) socket.write(`${JSON.stringify({ id: 1, type: "result", result: "forged" })}\n`);
    });
    await new Promise<void>((resolve) => server!.listen(socketPath, resolve));
    return { socketPath, received };
  }

  async function privateDir(): Promise<string> {
    const dir = join(base, "sock");
    await mkdir(dir, { mode: 0o700 });
    return dir;
  }

  asRoot("a socket file owned by another uid gets nothing, and its early answer is not taken", async () => {
    const { socketPath, received } = await impostor(await privateDir(), { speakFirst: true });
    await lchown(socketPath, OTHER_UID, OTHER_UID);
    await expect(callDaemon(socketPath, { action: "exec", name: "demo", cmd: "id" })).rejects.toMatchObject({
      code: "CONTROLLER_STATE_INSECURE",
      message: expect.stringContaining(`belongs to uid ${OTHER_UID}`),
    });
    await new Promise((r) => setTimeout(r, 100));
    expect(Buffer.concat(received).length).toBe(0);
  });

  asRoot("a socket of ours in a directory owned by another uid gets nothing", async () => {
    const dir = await privateDir();
    const { socketPath, received } = await impostor(dir);
    await chown(dir, OTHER_UID, OTHER_UID);
    await expect(callDaemon(socketPath, { action: "exec", name: "demo", cmd: "id" })).rejects.toMatchObject({
      code: "CONTROLLER_STATE_INSECURE",
    });
    await new Promise((r) => setTimeout(r, 100));
    expect(Buffer.concat(received).length).toBe(0);
  });

  test("a socket of ours in a private directory of ours is used", async () => {
    const { socketPath, received } = await impostor(await privateDir());
    await expect(callDaemon(socketPath, { action: "exec", name: "demo", cmd: "id" })).resolves.toBe("answered");
    expect(Buffer.concat(received).toString()).toContain('"cmd":"id"');
  });
});

/** SIGTERM to the test's daemon, then wait (at most 15 s) for it to be gone. */
async function stopDaemon(layout: StateLayout): Promise<void> {
  const pid = await readPidFile(layout.pidFile("instances", "demo"));
  if (pid === undefined) return;
  process.kill(pid, "SIGTERM");
  const deadline = Date.now() + 15_000;
  while (pidAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  if (pidAlive(pid)) process.kill(pid, "SIGKILL");
}
