// A large transfer's bytes come down a raw stream of their own (transfer-stream.ts), from a guest
// the host never trusts: a scripted agent answers on the channel and a local TCP server plays the
// guest's end of the stream, sending whatever a hostile guest root might.
import { createHash } from "node:crypto";
import { createServer, connect as netConnect, type Server, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { AgentChannel } from "../src/channel.js";
import { readThroughAgentTo, writeThroughAgent } from "../src/file-transfer.js";
import { TRANSFER_CHUNK_BYTES } from "../src/protocol.js";
import { ScriptedAgent, rejection } from "./support/scripted-agent.js";

const logger = { info: () => undefined, warn: () => undefined };
const KEY = "0123456789abcdef0123456789abcdef";
const LENGTH = 3 * TRANSFER_CHUNK_BYTES;

let server: Server | undefined;
afterEach(() => server?.close());

/** A guest end of the stream: checks the key line, then runs `serve` with the bytes after it. */
async function guestEnd(serve: (socket: Socket, rest: Buffer) => void): Promise<number> {
  server = createServer((socket) => {
    socket.on("error", () => undefined); // the host cuts streams it refuses
    let head = Buffer.alloc(0);
    const onKey = (chunk: Buffer): void => {
      head = Buffer.concat([head, chunk]);
      const nl = head.indexOf(10);
      if (nl === -1) return;
      socket.off("data", onKey);
      if (head.subarray(0, nl).toString("latin1") === KEY) serve(socket, head.subarray(nl + 1));
      else socket.destroy();
    };
    socket.on("data", onKey);
  });
  await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
  return (server.address() as { port: number }).port;
}

const connects: number[] = [];
const connect = (port: number): Promise<Duplex> =>
  new Promise((resolve, reject) => {
    connects.push(port);
    const socket = netConnect(port, "127.0.0.1", () => resolve(socket));
    socket.once("error", reject);
  });

/** A large read's opening reply, naming `stream` as where its bytes come from. */
function readOpen(stream: unknown) {
  return {
    size: LENGTH,
    length: LENGTH,
    sha256: "a".repeat(64),
    truncated: false,
    token: "t1",
    chunkBytes: TRANSFER_CHUNK_BYTES,
    stream,
  };
}

function readingAgent(port: number, sent: number) {
  const agent = new ScriptedAgent();
  const channel = new AgentChannel(agent.execution, logger, "[test]");
  agent.onRequest = (req) => {
    if (req.op === "file-read-open") {
      agent.reply(req.id, readOpen({ port, key: KEY }));
    } else if (req.op === "file-read-stream") {
      setTimeout(() => agent.reply(req.id, { sent }), 200);
    }
  };
  return { agent, channel };
}

test("a read stream longer than announced closes the channel; the sink never gets more than the length", async () => {
  const port = await guestEnd((socket) => socket.end(Buffer.alloc(LENGTH + 64 * 1024, 1)));
  const { channel } = readingAgent(port, LENGTH);
  let got = 0;
  const sink = { write: (piece: Buffer) => void (got += piece.length) };
  const error = await rejection(readThroughAgentTo(channel, "/big", LENGTH, true, sink, undefined, connect));
  expect(error.code).toBe("AGENT_PROTOCOL");
  expect(error.message).toContain("longer than");
  expect(got).toBeLessThanOrEqual(LENGTH);
  expect(channel.closedReason).toBe(error);
});

test("a read stream that ends short fails the read, whatever the agent claims it sent", async () => {
  const port = await guestEnd((socket) => socket.end(Buffer.alloc(LENGTH - 10, 1)));
  const { channel, agent } = readingAgent(port, LENGTH);
  const error = await rejection(
    readThroughAgentTo(channel, "/big", LENGTH, true, { write: () => undefined }, undefined, connect),
  );
  expect(error.code).toBe("FILE_CHECKSUM_MISMATCH");
  expect(error.message).toContain(`${LENGTH - 10} of the ${LENGTH} bytes`);
  expect(channel.closed).toBe(false);
  expect((await agent.next("file-read-close")).args).toEqual({ token: "t1" });
});

test("a stream door that is no loopback port or key is refused before anything connects", async () => {
  connects.length = 0;
  for (const stream of [{ port: 70_000, key: KEY }, { port: 22, key: "../../etc" }, undefined]) {
    const agent = new ScriptedAgent();
    const channel = new AgentChannel(agent.execution, logger, "[test]");
    agent.onRequest = (req) => agent.reply(req.id, readOpen(stream));
    const error = await rejection(
      readThroughAgentTo(channel, "/big", LENGTH, true, { write: () => undefined }, undefined, connect),
    );
    expect(error.code).toBe("AGENT_PROTOCOL");
    expect(error.message).toContain("result.stream");
  }
  expect(connects).toEqual([]);
});

test("a write stream: the key first, exactly the bytes, and an abort stops it with the file discarded", async () => {
  const data = Buffer.alloc(LENGTH, 7);
  const received: Buffer[] = [];
  const port = await guestEnd((socket, rest) => {
    received.push(rest);
    socket.on("data", (chunk: Buffer) => received.push(chunk));
  });
  const agent = new ScriptedAgent();
  const channel = new AgentChannel(agent.execution, logger, "[test]");
  const stop = new AbortController();
  agent.onRequest = (req) => {
    if (req.op === "file-write-open") {
      agent.reply(req.id, { token: "w1", chunkBytes: TRANSFER_CHUNK_BYTES, stream: { port, key: KEY } });
    } else if (req.op === "file-write-stream") {
      // Never answers: the guest stalls, and the user gives up.
      setTimeout(() => stop.abort(new Error("stopped by the user")), 300);
    }
  };
  const sum = createHash("sha256").update(data).digest("hex");
  const failure = await writeThroughAgent(channel, "/big", data, { signal: stop.signal }, connect).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect((failure as Error).message).toBe("stopped by the user");
  expect(Buffer.concat(received).equals(data)).toBe(true);
  expect((await agent.next("file-write-abort")).args).toEqual({ token: "w1" });
  expect(agent.requests.find((r) => r.op === "file-write-open")?.args).toMatchObject({ size: LENGTH, sha256: sum });
  expect(agent.requests.some((r) => r.op === "file-write-commit")).toBe(false);
});
