// The host never trusts the agent: whatever a hostile guest writes on the agent's pipes, the
// host's memory stays bounded and the client fails with a typed error instead of hanging or
// crashing. The agent is scripted here; supervisor.vm.test.ts does the same to a real guest.
import { LIMITS } from "@pi-sandbox/config";
import { AgentChannel } from "../src/channel.js";
import { SupervisorClient, type SupervisorError } from "../src/index.js";
import { readThroughAgent } from "../src/file-transfer.js";
import { listThroughAgent } from "../src/file-tree.js";
import { MAX_AGENT_LINE_BYTES, TRANSFER_CHUNK_BYTES } from "../src/protocol.js";
import { ScriptedAgent, rejection, scriptedVm } from "./support/scripted-agent.js";

const MiB = 1024 * 1024;
const warnings: string[] = [];
const logger = { info: () => undefined, warn: (line: string) => void warnings.push(line) };

beforeEach(() => {
  warnings.length = 0;
});

function channelOver(agent: ScriptedAgent) {
  const kills: unknown[] = [];
  const channel = new AgentChannel(agent.execution, logger, "[test]", (reason) => kills.push(reason));
  return { channel, kills };
}

/** Writes `total` bytes of `x` without a newline, a chunk at a time, as `tr` into the pipe would. */
async function endlessLine(stream: NodeJS.WritableStream, total: number): Promise<void> {
  const chunk = Buffer.alloc(64 * 1024, "x");
  for (let written = 0; written < total; written += chunk.length) {
    stream.write(chunk);
    if (written % (8 * MiB) === 0) await new Promise((r) => setImmediate(r));
  }
}

test("an endless line closes the channel with AGENT_PROTOCOL, holding at most one line's bound", async () => {
  const agent = new ScriptedAgent();
  agent.exitOnEndOfInput = false; // guest root's writer keeps the pipe open
  const { channel } = channelOver(agent);
  const pending = rejection(channel.request("ping", {}, (r) => r, { timeoutMs: 60_000 }));
  const closed = new Promise<SupervisorError>((resolve) => channel.onClosed(resolve));
  const before = process.memoryUsage();
  await endlessLine(agent.stdout, 256 * MiB);
  const after = process.memoryUsage();
  const error = await pending;
  expect(error.code).toBe("AGENT_PROTOCOL");
  expect(error.message).toContain(`longer than ${MAX_AGENT_LINE_BYTES} bytes`);
  expect((await closed).code).toBe("AGENT_PROTOCOL");
  expect(channel.closedReason).toBe(error);
  // Later calls fail the same way, and the agent is told to stop (its stdin ends).
  expect((await rejection(channel.request("ping", {}, (r) => r))).code).toBe("AGENT_PROTOCOL");
  expect(agent.stdinEnded).toBe(true);
  // 256 MiB went through; the host kept at most about one line's bound of it.
  expect(
    after.heapUsed + after.external + after.arrayBuffers - (before.heapUsed + before.external + before.arrayBuffers),
  ).toBeLessThan(4 * MAX_AGENT_LINE_BYTES);
});

test("garbage, unknown events and replies to requests never sent are protocol errors", async () => {
  for (const line of [
    "this is not json",
    "[1,2,3]",
    '{"event":"surprise","data":{}}',
    '{"id":99,"ok":true,"result":{}}',
  ]) {
    const agent = new ScriptedAgent();
    const { channel } = channelOver(agent);
    const pending = rejection(channel.request("ping", {}, (r) => r));
    agent.stdout.write(`${line}\n`);
    expect((await pending).code).toBe("AGENT_PROTOCOL");
  }
});

test("a read whose claimed length is larger than asked is refused before any data is held", async () => {
  const agent = new ScriptedAgent();
  const { channel } = channelOver(agent);
  agent.onRequest = (req) =>
    agent.reply(req.id, {
      size: 2 ** 40,
      length: 2 ** 40,
      sha256: "0".repeat(64),
      truncated: false,
      token: "t1",
      chunkBytes: TRANSFER_CHUNK_BYTES,
    });
  const error = await rejection(readThroughAgent(channel, "/etc/passwd", 1024, true, undefined));
  expect(error.code).toBe("AGENT_PROTOCOL");
  expect(error.message).toContain("result.length");
  expect(agent.requests.map((r) => r.op)).toEqual(["file-read-open"]);
});

test("a tree listing with names that would leave the destination, or out of order, is refused", async () => {
  const entry = (path: string, type = "file") => ({ path, type, size: 1, mode: 0o644 });
  for (const [entries, problem] of [
    [[entry("../etc/passwd")], "plain relative path"],
    [[entry("a//b")], "plain relative path"],
    [[entry("/etc/passwd")], "plain relative path"],
    [[entry("sub/x")], "before its directory"],
    [[entry("x"), entry("x")], "listed twice"],
    [[entry("bad\ud800name")], "well-formed"],
    [[entry("x", "device")], "entry type"],
    [[entry("a"), entry("b"), entry("c")], "at most 2 entries"],
  ] as const) {
    const agent = new ScriptedAgent();
    const { channel } = channelOver(agent);
    agent.onRequest = (req) => agent.reply(req.id, { entries, truncated: false, skippedNames: 0 });
    const error = await rejection(listThroughAgent(channel, "/workspace", 2, {}));
    expect(error.code).toBe("AGENT_PROTOCOL");
    expect(error.message).toContain(problem);
  }
});

test("a chunk larger than asked, or a truncated flag that contradicts the sizes, is refused", async () => {
  const length = 3 * TRANSFER_CHUNK_BYTES;
  const agent = new ScriptedAgent();
  const { channel } = channelOver(agent);
  agent.onRequest = (req) => {
    if (req.op === "file-read-open") {
      agent.reply(req.id, {
        size: length,
        length,
        sha256: "a".repeat(64),
        truncated: false,
        token: "t1",
        chunkBytes: TRANSFER_CHUNK_BYTES,
      });
    } else if (req.op === "file-read-chunk") {
      agent.reply(req.id, { offset: 0, data: Buffer.alloc(TRANSFER_CHUNK_BYTES + 1).toString("base64"), eof: false });
    }
  };
  const error = await rejection(readThroughAgent(channel, "/big", length, true, undefined));
  expect(error.code).toBe("AGENT_PROTOCOL");
  expect(error.message).toContain("result.data");

  const liar = new ScriptedAgent();
  const second = channelOver(liar);
  liar.onRequest = (req) =>
    liar.reply(req.id, { size: 10, length: 4, sha256: "a".repeat(64), truncated: false, data: "AAAAAA==" });
  expect((await rejection(readThroughAgent(second.channel, "/x", 64, false, undefined))).code).toBe("AGENT_PROTOCOL");
});

test("exec output beyond the 64 KiB cap is cut on the host, and the channel stays open", async () => {
  const agent = new ScriptedAgent();
  const vm = scriptedVm(agent);
  agent.onRequest = (req) => {
    if (req.op === "hello") agent.reply(req.id, { protocol: 2 });
    if (req.op === "exec") {
      agent.reply(req.id, {
        handle: "x1",
        running: false,
        exitCode: 0,
        output: `HEAD${"y".repeat(MiB)}TAIL`,
        truncatedBytes: 5,
      });
    }
  };
  const client = await SupervisorClient.start({ vm });
  const result = await client.exec("true");
  expect(Buffer.byteLength(result.output)).toBeLessThanOrEqual(LIMITS.outputMaxBytes);
  expect(result.output.startsWith("HEAD") && result.output.endsWith("TAIL")).toBe(true);
  expect(result.output).toMatch(/\[\.\.\. pi-sandbox: \d+ bytes of output omitted \.\.\.\]/);
  expect(result.truncatedBytes).toBeGreaterThan(MiB - LIMITS.outputMaxBytes);
  expect(client.closed).toBe(false);
  await client.close();
});

test("counts are checked: services never sent, more log lines than asked, a step never sent", async () => {
  const agent = new ScriptedAgent();
  const vm = scriptedVm(agent);
  const client = await SupervisorClient.start({ vm });
  const reasons: SupervisorError[] = [];
  client.onClosed((reason) => reasons.push(reason));
  const steps = client.runSetup({ commands: ["make"] });
  const setup = await agent.next("run-setup");
  const exec = client.exec("sleep 100", { timeoutMs: 60_000 });
  await agent.next("exec");
  agent.reply(setup.id, {
    handle: "x2",
    running: false,
    exitCode: 0,
    output: "",
    truncatedBytes: 0,
    steps: [
      { command: "make", exitCode: 0 },
      { command: "rm -rf /", exitCode: 0 },
      { command: "x", exitCode: 0 },
    ],
    ok: true,
    timedOut: false,
    logPath: "/l",
    cleanup: { method: "environ", stopped: 0 },
  });
  const error = await rejection(steps);
  expect(error.code).toBe("AGENT_PROTOCOL");
  expect(error.message).toContain("result.steps");
  // Every pending and later call fails with the same recorded reason.
  expect(await rejection(exec)).toBe(error);
  expect(await rejection(client.ping())).toBe(error);
  expect(client.closedReason).toBe(error);
  expect(reasons).toEqual([error]);
  await client.close();
  expect(client.closedReason).toBe(error);
});

test("a service listing naming services the host never sent is refused", async () => {
  const agent = new ScriptedAgent();
  const client = await SupervisorClient.start({ vm: scriptedVm(agent) });
  agent.onRequest = (req) => {
    if (req.op === "file-read-open")
      agent.send({ id: req.id, ok: false, error: { code: "FILE_NOT_FOUND", message: "none" } });
    if (req.op === "service-status") {
      const services = Array.from({ length: 10_000 }, (_, i) => ({ name: `svc${i}` }));
      agent.reply(req.id, { services });
    }
  };
  const error = await rejection(client.serviceStatus());
  expect(error.code).toBe("AGENT_PROTOCOL");
  expect(error.message).toContain("result.services");
  await client.close();
});

test("logs with more lines than asked are cut to the lines asked for", async () => {
  const agent = new ScriptedAgent();
  const client = await SupervisorClient.start({ vm: scriptedVm(agent) });
  agent.onRequest = (req) => {
    const text = Array.from({ length: 1000 }, (_, i) => `line ${i}\n`).join("");
    agent.reply(req.id, { service: "web", text, lines: 3, truncatedBytes: 0, logPath: "/l" });
  };
  const tail = await client.logs("web", { lines: 3 });
  expect(tail.text.split("\n").length - 1).toBeLessThanOrEqual(4);
  expect(tail.text.endsWith("line 999\n")).toBe(true);
  expect(tail.truncatedBytes).toBeGreaterThan(0);
  agent.onRequest = (req) =>
    agent.reply(req.id, { service: "web", text: "", lines: 4, truncatedBytes: 0, logPath: "/l" });
  expect((await rejection(client.logs("web", { lines: 3 }))).code).toBe("AGENT_PROTOCOL");
  await client.close();
});

test("a flood of protocol-error events is logged only at first", async () => {
  const agent = new ScriptedAgent();
  const { channel } = channelOver(agent);
  for (let i = 0; i < 10_000; i++) agent.send({ event: "protocol-error", data: { message: "x".repeat(10_000) } });
  await new Promise((r) => setImmediate(r));
  expect(warnings.length).toBeLessThanOrEqual(20);
  expect(warnings.every((w) => w.length < 400)).toBe(true);
  expect(channel.closed).toBe(false);
});

test("endless stderr is kept to its last 4 KiB and logged within a budget", async () => {
  const agent = new ScriptedAgent();
  const { channel } = channelOver(agent);
  const line = Buffer.from(`${"e".repeat(3000)}\n`);
  for (let i = 0; i < 20_000; i++) agent.stderr.write(line); // ~60 MiB of lines
  await endlessLine(agent.stderr, 64 * MiB); // and one endless line
  await new Promise((r) => setImmediate(r));
  expect(Buffer.byteLength(channel.stderr)).toBeLessThanOrEqual(4096);
  expect(channel.stderr.endsWith("xxxx")).toBe(true);
  const logged = warnings.reduce((sum, w) => sum + w.length, 0);
  expect(logged).toBeLessThan(80 * 1024);
  expect(warnings.at(-1)).toContain("no longer logged");
  expect(channel.closed).toBe(false);
});

test("an agent that speaks another protocol version fails the start with AGENT_PROTOCOL", async () => {
  const agent = new ScriptedAgent();
  agent.hello = () => agent.send({ event: "hello", data: { protocol: 1 } });
  const error = await rejection(SupervisorClient.start({ vm: scriptedVm(agent) }));
  expect(error.code).toBe("AGENT_PROTOCOL");
  expect(error.message).toContain("protocol 1");
});
