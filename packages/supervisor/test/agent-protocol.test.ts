// The agent on its own, driven over raw stdin/stdout: what the typed client never sends.
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { agentArchivePath, readAgentArchive } from "../src/index.js";
import { helloArgs } from "../src/protocol.js";
import { processAlive, waitFor } from "./support/local.js";

type Message = {
  id?: number;
  ok?: boolean;
  result?: Record<string, unknown>;
  error?: { code: string };
  event?: string;
};

class RawAgent {
  readonly messages: Message[] = [];
  private waiters: (() => void)[] = [];
  readonly exited: Promise<number | null>;

  constructor(readonly child: ChildProcessWithoutNullStreams) {
    createInterface({ input: child.stdout }).on("line", (line) => {
      this.messages.push(JSON.parse(line) as Message);
      this.waiters.splice(0).forEach((wake) => wake());
    });
    child.stderr.resume();
    this.exited = new Promise((resolve) => child.once("exit", (code) => resolve(code)));
  }

  send(line: string): void {
    this.child.stdin.write(`${line}\n`);
  }

  async reply(id: number): Promise<Message> {
    for (;;) {
      const found = this.messages.find((m) => m.id === id);
      if (found) return found;
      await new Promise<void>((wake) => this.waiters.push(wake));
    }
  }

  async request(id: number, op: string, args: Record<string, unknown> = {}): Promise<Message> {
    this.send(JSON.stringify({ id, op, args }));
    return this.reply(id);
  }
}

let dir: string;
let agent: RawAgent;
const HELLO_ID = 1_000_000;

/** Starts the agent and says hello as the client does (with the host's limits). */
async function launch(): Promise<RawAgent> {
  await readAgentArchive(); // builds it when the sources changed
  const child = spawn(
    "python3",
    [
      agentArchivePath(),
      "--state-dir",
      join(dir, "state"),
      "--workspace",
      join(dir, "ws"),
      "--cgroup-root",
      "none",
      "--shell",
      "/bin/sh",
    ],
    { stdio: ["pipe", "pipe", "pipe"] },
  );
  const raw = new RawAgent(child);
  await waitFor(() => raw.messages.some((m) => m.event === "hello"), 10_000, "hello");
  expect((await raw.request(HELLO_ID, "hello", helloArgs())).ok).toBe(true);
  return raw;
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-agent-"));
  await mkdir(join(dir, "ws"));
});

afterEach(async () => {
  agent?.child.stdin.end();
  await agent?.exited;
  await rm(dir, { recursive: true, force: true });
});

test("a reopen clears old command files and pids but keeps sticky ports", async () => {
  await mkdir(join(dir, "state", "exec"), { recursive: true });
  await writeFile(join(dir, "state", "exec", "xold.out"), "stale");
  await writeFile(join(dir, "state", "agent.pid"), "1\n");
  await writeFile(join(dir, "state", "ports.json"), JSON.stringify({ version: 1, ports: { web: 23456 } }));
  agent = await launch();
  expect(await readdir(join(dir, "state", "exec"))).toEqual([]);
  expect((await readFile(join(dir, "state", "agent.pid"), "utf8")).trim()).toBe(String(agent.child.pid));
  expect(JSON.parse(await readFile(join(dir, "state", "ports.json"), "utf8"))).toEqual({
    version: 1,
    ports: { web: 23456 },
  });
});

test("garbage lines and unknown ops are answered without breaking the channel", async () => {
  agent = await launch();
  agent.send("this is not json");
  agent.send(JSON.stringify({ op: "ping" }));
  await waitFor(
    () => agent.messages.filter((m) => m.event === "protocol-error").length === 2,
    5_000,
    "protocol errors",
  );
  expect((await agent.request(1, "no-such-op")).error?.code).toBe("UNKNOWN_OP");
  expect((await agent.request(2, "exec", { command: "true", timeoutMs: 99_999 })).error?.code).toBe("INVALID_ARGUMENT");
  expect((await agent.request(3, "ping")).ok).toBe(true);
});

test("a write whose data does not match its sha256 changes nothing", async () => {
  agent = await launch();
  const target = join(dir, "ws", "keep.txt");
  await writeFile(target, "original");
  const data = Buffer.from("replacement");
  const wrongSum = createHash("sha256").update("something else").digest("hex");
  const reply = await agent.request(1, "file-write-open", {
    path: target,
    size: data.length,
    sha256: wrongSum,
    data: data.toString("base64"),
  });
  expect(reply.error?.code).toBe("FILE_CHECKSUM_MISMATCH");
  expect(await readFile(target, "utf8")).toBe("original");
  expect(await readdir(join(dir, "ws"))).toEqual(["keep.txt"]);
  const short = await agent.request(2, "file-write-open", {
    path: target,
    size: data.length + 5,
    sha256: createHash("sha256").update(data).digest("hex"),
    data: data.toString("base64"),
  });
  expect(short.error?.code).toBe("FILE_CHECKSUM_MISMATCH");
  expect(await readFile(target, "utf8")).toBe("original");
});

test("many slow requests are served at once, not one after another", async () => {
  agent = await launch();
  const t0 = Date.now();
  const ids = Array.from({ length: 20 }, (_, i) => i + 1);
  for (const id of ids) agent.send(JSON.stringify({ id, op: "exec", args: { command: "sleep 1", timeoutMs: 10_000 } }));
  const replies = await Promise.all(ids.map((id) => agent.reply(id)));
  expect(replies.every((r) => r.ok && r.result?.exitCode === 0)).toBe(true);
  expect(Date.now() - t0).toBeLessThan(6_000);
});

test("when the channel closes the agent stops its services and commands and exits", async () => {
  agent = await launch();
  const svc = await agent.request(1, "service-ensure", {
    services: [{ name: "idle", command: "exec sleep 600", health: { kind: "process" }, timeoutMs: 5000, env: {} }],
  });
  const services = (svc.result as { services: { pid: number }[] }).services;
  const cmd = await agent.request(2, "exec", { command: "exec sleep 600", timeoutMs: 0 });
  const pids = [services[0]!.pid, cmd.result!.guestPid as number];
  for (const pid of pids) expect(await processAlive(pid)).toBe(true);
  agent.child.stdin.end();
  expect(await agent.exited).toBe(0);
  for (const pid of pids) await waitFor(async () => !(await processAlive(pid)), 5_000, `pid ${pid} to stop`);
});

test("every hello carries fresh host entropy for the guest kernel, and the agent takes it", async () => {
  const first = helloArgs().entropy;
  const second = helloArgs().entropy;
  expect(first).toMatch(/^[0-9a-f]{64}$/);
  expect(second).toMatch(/^[0-9a-f]{64}$/);
  expect(second).not.toBe(first);
  agent = await launch(); // its hello carried one
  expect((await agent.request(2, "ping", {})).ok).toBe(true);
});
