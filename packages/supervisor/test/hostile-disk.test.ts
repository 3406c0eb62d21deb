// Large transfers through the transfer disk (transfer-disk.ts), with a guest the host never
// trusts: a scripted agent reads and writes the drive file as the real one does, or lies about
// sizes, CRC-32s and windows as a hostile guest root might.
import { createHash, randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { crc32 } from "node:zlib";
import { AgentChannel } from "../src/channel.js";
import { GuestFiles } from "../src/guest-files.js";
import {
  DISK_WINDOW_BYTES,
  diskLaneOf,
  readThroughDisk,
  writeThroughDisk,
  type DiskLane,
} from "../src/transfer-disk.js";
import { ScriptedAgent, rejection, type SentRequest } from "./support/scripted-agent.js";

const logger = { info: () => undefined, warn: () => undefined };
const MiB = 1024 * 1024;
const LENGTH = 2 * DISK_WINDOW_BYTES + 3 * MiB + 17;
const DATA = randomBytes(LENGTH);

let dir: string;
let drive: string;
let lane: DiskLane;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "pisb-disk-"));
  drive = path.join(dir, "transfer.raw");
  fs.writeFileSync(drive, "");
  fs.truncateSync(drive, 64 * MiB);
  lane = diskLaneOf({ path: drive, sizeBytes: 64 * MiB, serial: "pisb-transfer" })!;
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

type Lie = (req: SentRequest, honest: Record<string, unknown>) => Record<string, unknown>;

/** An agent that moves the bytes through the drive as the real one does, its replies passed through `lie`. */
function diskAgent(lie: Lie = (_req, honest) => honest) {
  const agent = new ScriptedAgent();
  const channel = new AgentChannel(agent.execution, logger, "[test]");
  const guestFile: Buffer[] = [];
  let crc = 0;
  const fd = fs.openSync(drive, "r+");
  let closed = false;
  agent.onRequest = (req) => {
    if (closed) return;
    const a = req.args as { offset: number; length: number; window: number; path: string };
    let honest: Record<string, unknown> | undefined;
    if (req.op === "file-disk-write-open") honest = { token: "w1" };
    else if (req.op === "file-disk-write-piece") {
      const piece = Buffer.alloc(a.length);
      fs.readSync(fd, piece, 0, a.length, a.window);
      guestFile.push(piece);
      crc = crc32(piece, crc);
      honest = { written: a.offset + a.length, crc32: crc };
    } else if (req.op === "file-disk-write-commit") honest = { path: a.path ?? "/big", size: LENGTH, crc32: crc };
    else if (req.op === "file-disk-read-open") honest = { size: LENGTH, length: LENGTH, truncated: false, token: "r1" };
    else if (req.op === "file-disk-read-piece") {
      const piece = DATA.subarray(a.offset, a.offset + a.length);
      fs.writeSync(fd, piece, 0, piece.length, a.window);
      honest = { offset: a.offset, length: piece.length, crc32: crc32(piece) };
    } else if (req.op === "file-write-abort" || req.op === "file-read-close") honest = {};
    if (honest) agent.reply(req.id, lie(req, honest));
  };
  const close = (): void => {
    closed = true;
    fs.closeSync(fd);
  };
  return { agent, channel, guestFile, close };
}

const source = (data: Buffer) => ({
  size: data.length,
  sha256: createHash("sha256").update(data).digest("hex"),
  read: (offset: number, length: number) => data.subarray(offset, offset + length),
});

test("a write crosses the ring of windows piece by piece and commits with the whole CRC-32", async () => {
  const { agent, channel, guestFile, close } = diskAgent();
  const done = await writeThroughDisk(channel, lane, "/big", source(DATA), { mode: 0o640 });
  close();
  expect(done).toEqual({ path: "/big", sizeBytes: LENGTH, sha256: source(DATA).sha256 });
  expect(Buffer.concat(guestFile).equals(DATA)).toBe(true);
  // The drive file gave its blocks back, and kept its size.
  expect([fs.statSync(drive).size, fs.statSync(drive).blocks]).toEqual([64 * MiB, 0]);
  const pieces = agent.requests.filter((r) => r.op === "file-disk-write-piece").map((r) => r.args);
  expect(pieces).toEqual([
    { token: "w1", offset: 0, length: DISK_WINDOW_BYTES, window: 0 },
    { token: "w1", offset: DISK_WINDOW_BYTES, length: DISK_WINDOW_BYTES, window: DISK_WINDOW_BYTES },
    { token: "w1", offset: 2 * DISK_WINDOW_BYTES, length: 3 * MiB + 17, window: 2 * DISK_WINDOW_BYTES },
  ]);
  expect(agent.requests.find((r) => r.op === "file-disk-write-open")?.args).toEqual({
    path: "/big",
    size: LENGTH,
    mode: 0o640,
  });
  expect((await agent.next("file-disk-write-commit")).args).toEqual({ token: "w1", crc32: crc32(DATA) });
});

test("a write whose agent lies about its CRC-32 or the bytes written is aborted, never committed", async () => {
  const crcLie = diskAgent((req, honest) =>
    req.op === "file-disk-write-piece" && req.args.offset !== 0 ? { ...honest, crc32: 1234 } : honest,
  );
  const damaged = await rejection(writeThroughDisk(crcLie.channel, lane, "/big", source(DATA), {}));
  crcLie.close();
  expect(damaged.code).toBe("FILE_CHECKSUM_MISMATCH");
  expect((await crcLie.agent.next("file-write-abort")).args).toEqual({ token: "w1" });
  expect(crcLie.agent.requests.some((r) => r.op === "file-disk-write-commit")).toBe(false);

  const sizeLie = diskAgent((req, honest) =>
    req.op === "file-disk-write-piece" ? { ...honest, written: LENGTH } : honest,
  );
  const lied = await rejection(writeThroughDisk(sizeLie.channel, lane, "/big", source(DATA), {}));
  sizeLie.close();
  expect(lied.code).toBe("AGENT_PROTOCOL");
  expect(lied.message).toContain("result.written");
  expect(sizeLie.agent.requests.some((r) => r.op === "file-disk-write-commit")).toBe(false);

  const commitLie = diskAgent((req, honest) =>
    req.op === "file-disk-write-commit" ? { ...honest, path: "/etc/passwd" } : honest,
  );
  expect((await rejection(writeThroughDisk(commitLie.channel, lane, "/big", source(DATA), {}))).code).toBe(
    "AGENT_PROTOCOL",
  );
  commitLie.close();
});

test("a read takes exactly the windows it named, and its sink gets the file", async () => {
  const { agent, channel, close } = diskAgent();
  const got: Buffer[] = [];
  const read = await readThroughDisk(
    channel,
    lane,
    "/big",
    256 * MiB,
    true,
    { write: (p) => void got.push(p) },
    undefined,
  );
  close();
  expect(Buffer.concat(got).equals(DATA)).toBe(true);
  expect([fs.statSync(drive).size, fs.statSync(drive).blocks]).toEqual([64 * MiB, 0]);
  expect(read).toEqual({
    size: LENGTH,
    length: LENGTH,
    truncated: false,
    sha256: createHash("sha256").update(DATA).digest("hex"),
  });
  const windows = agent.requests.filter((r) => r.op === "file-disk-read-piece").map((r) => r.args.window);
  expect(windows).toEqual([0, DISK_WINDOW_BYTES, 2 * DISK_WINDOW_BYTES]);
  expect((await agent.next("file-read-close")).args).toEqual({ token: "r1" });
});

test("a read whose agent lies about lengths or CRC-32s, or fills another window, keeps nothing", async () => {
  const cases: [Lie, string, string][] = [
    // More than the host asked for at the open, or in a piece: a broken protocol.
    [
      (req, h) => (req.op === "file-disk-read-open" ? { ...h, length: 300 * MiB, size: 300 * MiB } : h),
      "AGENT_PROTOCOL",
      "result.length",
    ],
    [
      (req, h) => (req.op === "file-disk-read-piece" ? { ...h, length: DISK_WINDOW_BYTES + 1 } : h),
      "AGENT_PROTOCOL",
      "result.length",
    ],
    [(req, h) => (req.op === "file-disk-read-piece" ? { ...h, offset: 0 } : h), "AGENT_PROTOCOL", "result.offset"],
    // Fewer bytes (a file that shrank), a CRC-32 that is not the window's.
    [
      (req, h) => (req.op === "file-disk-read-piece" && req.args.offset ? { ...h, length: 5 } : h),
      "FILE_CHECKSUM_MISMATCH",
      "shrank",
    ],
    [
      (req, h) => (req.op === "file-disk-read-piece" && req.args.offset ? { ...h, crc32: 7 } : h),
      "FILE_CHECKSUM_MISMATCH",
      "damaged",
    ],
  ];
  for (const [lie, code, text] of cases) {
    const { channel, close } = diskAgent(lie);
    let got = 0;
    const error = await rejection(
      readThroughDisk(channel, lane, "/big", 256 * MiB, true, { write: (p) => void (got += p.length) }, undefined),
    );
    close();
    expect([error.code, error.message]).toEqual([code, expect.stringContaining(text)]);
    expect(got).toBeLessThanOrEqual(DISK_WINDOW_BYTES);
  }
  // The guest writes its piece elsewhere than the window named: the host reads the window it named
  // (emptied first, whatever the cases above left there).
  fs.truncateSync(drive, 0);
  fs.truncateSync(drive, 64 * MiB);
  const moved = diskAgent();
  const honest = moved.agent.onRequest;
  moved.agent.onRequest = (req) =>
    honest(req.op === "file-disk-read-piece" ? { ...req, args: { ...req.args, window: 48 * MiB } } : req);
  const error = await rejection(
    readThroughDisk(moved.channel, lane, "/big", 256 * MiB, true, { write: () => undefined }, undefined),
  );
  moved.close();
  expect([error.code, error.message]).toEqual(["FILE_CHECKSUM_MISMATCH", expect.stringContaining("damaged")]);
});

test("a small read comes inline with its CRC-32, exactly as long as said", async () => {
  const small = DATA.subarray(0, 1000);
  for (const [reply, code] of [
    [{ data: small.toString("base64"), crc32: crc32(small) }, undefined],
    [{ data: small.toString("base64"), crc32: 5 }, "FILE_CHECKSUM_MISMATCH"],
    [{ data: DATA.subarray(0, 2000).toString("base64"), crc32: crc32(small) }, "AGENT_PROTOCOL"],
  ] as const) {
    const agent = new ScriptedAgent();
    const channel = new AgentChannel(agent.execution, logger, "[test]");
    agent.onRequest = (req) => agent.reply(req.id, { size: 1000, length: 1000, truncated: false, ...reply });
    const got: Buffer[] = [];
    const read = readThroughDisk(
      channel,
      lane,
      "/small",
      256 * MiB,
      true,
      { write: (p) => void got.push(p) },
      undefined,
    );
    if (code) expect((await rejection(read)).code).toBe(code);
    else {
      await expect(read).resolves.toMatchObject({ length: 1000, truncated: false });
      expect(Buffer.concat(got).equals(small)).toBe(true);
    }
    expect(agent.requests.map((r) => r.op)).toEqual(["file-disk-read-open"]);
  }
});

test("an abort stops a disk write and discards the file", async () => {
  const stop = new AbortController();
  const { agent, channel, close } = diskAgent((req, honest) => {
    if (req.op === "file-disk-write-piece" && req.args.offset)
      setTimeout(() => stop.abort(new Error("stopped by the user")), 10);
    return honest;
  });
  const slow = agent.onRequest;
  agent.onRequest = (req) =>
    req.op === "file-disk-write-piece" && req.args.offset ? void setTimeout(() => slow(req), 500) : slow(req);
  const failure = await writeThroughDisk(channel, lane, "/big", source(DATA), { signal: stop.signal }).then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  close();
  expect(failure?.message).toBe("stopped by the user");
  expect((await agent.next("file-write-abort")).args).toEqual({ token: "w1" });
  expect(agent.requests.some((r) => r.op === "file-disk-write-commit")).toBe(false);
});

test("GuestFiles: an agent without the disk operations, or a busy disk, moves the file over the channel", async () => {
  const old = new ScriptedAgent();
  const channel = new AgentChannel(old.execution, logger, "[test]");
  const data = DATA.subarray(0, 600 * 1024);
  old.onRequest = (req) => {
    if (req.op === "file-disk-write-open")
      old.send({ id: req.id, ok: false, error: { code: "UNKNOWN_OP", message: "unknown operation" } });
    else if (req.op === "file-write-open") old.reply(req.id, { token: "c1", chunkBytes: 256 * 1024 });
    else if (req.op === "file-write-chunk")
      old.reply(req.id, {
        written: (req.args.offset as number) + Buffer.from(req.args.data as string, "base64").length,
      });
    else if (req.op === "file-write-commit")
      old.reply(req.id, { path: "/f", size: data.length, sha256: source(data).sha256 });
  };
  const files = new GuestFiles(channel, undefined, lane);
  await expect(files.writeFrom("/f", source(data))).resolves.toMatchObject({ sizeBytes: data.length });
  expect(lane.unusable).toBe(true);
  await files.writeFrom("/f", source(data));
  expect(old.requests.filter((r) => r.op === "file-disk-write-open")).toHaveLength(1);

  const busy = diskLaneOf({ path: path.join(dir, "other.raw"), sizeBytes: 64 * MiB, serial: "pisb-transfer" })!;
  busy.busy = true;
  old.requests.length = 0;
  await new GuestFiles(channel, undefined, busy).writeFrom("/f", source(data));
  expect(old.requests.map((r) => r.op)).toEqual([
    "file-write-open",
    "file-write-chunk",
    "file-write-chunk",
    "file-write-chunk",
    "file-write-commit",
  ]);
});
