// The waker's hand-over, in-process with a stand-in for the daemon it starts: it holds a parked
// instance's preview port, a request starts the daemon, which takes the port back, and the request
// reaches the daemon's gateway byte for byte; a foreign Host wakes nothing; a failed start is a 503.
import { lstat, mkdtemp, readFile, rm } from "node:fs/promises";
import { createServer as createHttpServer, type Server } from "node:http";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { StateLayout } from "../src/state/layout.js";
import { WakerLink, wakerHolding, type ParkedPreview } from "../src/state/waker-call.js";
import { runWaker, type WakerOptions } from "../src/waker/waker.js";

let dir: string;
let layout: StateLayout;
const servers: Server[] = [];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "waker-"));
  layout = new StateLayout(join(dir, "st"));
  await layout.ensurePrivate();
});

afterEach(async () => {
  for (const server of servers.splice(0)) server.close();
  await rm(dir, { recursive: true, force: true });
});

/** A port free on 127.0.0.1 right now. */
async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const port = (probe.address() as { port: number }).port;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/** Runs a waker of the test's state root; `stop` makes it hold nothing and waits for it to exit. */
function startWaker(spawnDaemon: WakerOptions["spawnDaemon"], log: string[] = []) {
  const run = runWaker(
    { socket: layout.wakerSocketPath(), pidFile: layout.wakerPidFile() },
    { spawnDaemon, log: (line) => log.push(line), emptyGraceMs: 300, wakeTimeoutMs: 5_000 },
  );
  return { run, log };
}

/** Opens a link once the waker answers. */
async function link(): Promise<WakerLink> {
  for (let i = 0; i < 100; i++) {
    const opened = await WakerLink.open(layout);
    if (opened) return opened;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error("the waker never answered");
}

/** Parks instance `name` with one preview on `hostPort` (as a daemon does before it exits). */
async function park(name: string, hostPort: number): Promise<void> {
  const daemon = await link();
  const previews: ParkedPreview[] = [{ key: "web", hostPort, guestPort: 8000, links: [{ url: "/", title: "web" }] }];
  expect(await daemon.request({ type: "hold", name, address: "127.0.0.1", previews })).toMatchObject({ type: "held" });
  daemon.close();
}

/**
 * The daemon's start as parking.ts does it: takes the previews back, binds a gateway on the same
 * port (one answering with the Host it saw), says so; the daemon then runs on (never exits).
 */
async function daemonTakesBack(name: string): Promise<number | null> {
  const daemon = await link();
  const released = await daemon.request({ type: "release", name });
  if (released.type !== "released" || !released.held) throw new Error("nothing was held");
  const gateway = createHttpServer((req, res) =>
    res.end(`gateway saw ${req.method} ${req.url} for ${req.headers.host}`),
  );
  servers.push(gateway);
  await new Promise<void>((resolve) => gateway.listen(released.previews[0]!.hostPort, released.address, resolve));
  await daemon.request({ type: "taken", name, listening: true });
  daemon.close();
  return new Promise(() => undefined);
}

/** Sends `head` raw to 127.0.0.1:`port`; resolves with everything answered until the close. */
function raw(port: number, head: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => socket.write(head));
    let answer = "";
    socket.on("data", (chunk) => (answer += chunk.toString()));
    socket.on("close", () => resolve(answer));
    socket.on("error", reject);
  });
}

test("a request to a parked preview starts the daemon once; the daemon takes the port back and answers every waiting request", async () => {
  const port = await freePort();
  const spawned: string[] = [];
  const waker = startWaker((name) => {
    spawned.push(name);
    return daemonTakesBack(name);
  });
  await park("shop", port);
  expect([...(await wakerHolding(layout))]).toEqual(["shop"]);

  const answers = await Promise.all(
    ["/a", "/b", "/c"].map((path) => fetch(`http://127.0.0.1:${port}${path}`).then((res) => res.text())),
  );
  expect(answers).toEqual(["/a", "/b", "/c"].map((path) => `gateway saw GET ${path} for 127.0.0.1:${port}`));
  expect(spawned).toEqual(["shop"]);
  expect([...(await wakerHolding(layout))]).toEqual([]);
  // Nothing held, nothing piped: it exits, and its pid file and socket go with it.
  expect(await waker.run).toBe(0);
  await expect(lstat(layout.wakerPidFile())).rejects.toMatchObject({ code: "ENOENT" });
  await expect(lstat(layout.wakerSocketPath())).rejects.toMatchObject({ code: "ENOENT" });
});

test("a request for another Host, or bytes that are no request, are closed unanswered and wake nothing", async () => {
  const port = await freePort();
  const spawned: string[] = [];
  const waker = startWaker(async (name) => {
    spawned.push(name);
    return 1;
  });
  await park("quiet", port);
  expect(await raw(port, `GET / HTTP/1.1\r\nHost: evil.example:${port}\r\n\r\n`)).toBe("");
  expect(await raw(port, `GET / HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n`)).toBe("");
  expect(await raw(port, `${"x".repeat(20_000)}`)).toBe("");
  expect(spawned).toEqual([]);
  expect([...(await wakerHolding(layout))]).toEqual(["quiet"]);
  const daemon = await link();
  await daemon.request({ type: "release", name: "quiet" });
  daemon.close();
  expect(await waker.run).toBe(0);
});

test("a daemon that fails at its start: the waiting request gets a 503 saying so, and the port stays held for the next", async () => {
  const port = await freePort();
  let starts = 0;
  const waker = startWaker(async () => {
    starts++;
    return 1;
  });
  await park("broken", port);
  const first = await fetch(`http://127.0.0.1:${port}/`);
  expect(first.status).toBe(503);
  expect(await first.text()).toContain(
    "Preview of broken could not wake its instance: its controller exited at its start (code 1)",
  );
  expect([...(await wakerHolding(layout))]).toEqual(["broken"]);
  expect((await fetch(`http://127.0.0.1:${port}/`)).status).toBe(503);
  expect(starts).toBe(2);
  const daemon = await link();
  await daemon.request({ type: "release", name: "broken" });
  daemon.close();
  expect(await waker.run).toBe(0);
});

test("a daemon that takes the port back for an instance no longer parked, or goes away before it listens: the waiting request gets a 503", async () => {
  const port = await freePort();
  const waker = startWaker(async (name) => {
    const daemon = await link();
    await daemon.request({ type: "release", name });
    if (name === "gone") daemon.close();
    else await daemon.request({ type: "taken", name, listening: false });
    return new Promise(() => undefined);
  });
  await park("moved", port);
  const moved = await fetch(`http://127.0.0.1:${port}/`);
  expect(moved.status).toBe(503);
  expect(await moved.text()).toContain("the instance is no longer suspended");

  const other = await freePort();
  await park("gone", other);
  const gone = await fetch(`http://127.0.0.1:${other}/`);
  expect(gone.status).toBe(503);
  expect(await gone.text()).toContain("its controller exited before it listened again");
  expect(await waker.run).toBe(0);
});

test("one waker per state root: a second steps aside; its socket is 0600 and it refuses what is not a loopback hold", async () => {
  const port = await freePort();
  const first = startWaker(async () => 1);
  await park("one", port);
  const second = startWaker(async () => 1);
  expect(await second.run).toBe(0);
  expect((await lstat(layout.wakerSocketPath())).mode & 0o777).toBe(0o600);
  expect(await readFile(layout.wakerPidFile(), "utf8")).toBe(`${process.pid}\n`);

  const daemon = await link();
  const hold = (address: string, previews: unknown[] = []) =>
    daemon.request({ type: "hold", name: "two", address, previews: previews as ParkedPreview[] });
  await expect(hold("0.0.0.0")).rejects.toThrow("is not a loopback address");
  await expect(hold("127.0.0.1", [{ key: "web", hostPort: 70_000, guestPort: 1, links: [] }])).rejects.toThrow(
    "a preview is malformed",
  );
  // A port someone else listens on: nothing of the instance stays bound.
  await expect(hold("127.0.0.1", [{ key: "web", hostPort: port, guestPort: 1, links: [] }])).rejects.toThrow(
    "EADDRINUSE",
  );
  expect([...(await wakerHolding(layout))]).toEqual(["one"]);
  await daemon.request({ type: "release", name: "one" });
  daemon.close();
  expect(await first.run).toBe(0);
});
