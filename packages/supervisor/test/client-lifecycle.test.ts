// The client's hold on the agent over the local fake guest: a start that fails says why (no
// python3, no state dir, an abort), close stops what the agent ran, detach leaves it for a new client.
import { spawn } from "node:child_process";
import { createServer, type AddressInfo } from "node:net";
import { mkdir, mkdtemp, readFile, readdir, rm, stat, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLocalGuestVm, type LocalGuestVm } from "@pi-sandbox/vm/testing";
import {
  SupervisorClient,
  agentBootArgument,
  agentDoorOf,
  writeAgentSeed,
  isSupervisorError,
  silentLogger,
  type StartSupervisorOptions,
} from "../src/index.js";
import { processAlive, waitFor } from "./support/local.js";

let dir: string;
let vm: LocalGuestVm;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-life-"));
  vm = await createLocalGuestVm({ root: join(dir, "root") });
});

afterEach(async () => {
  await vm.close();
  await rm(dir, { recursive: true, force: true });
});

/** Counts the exec bridges (the agent run over an exec) that clients start from now on. */
function countBridges(): { count: number } {
  const seen = { count: 0 };
  const exec = vm.exec.bind(vm);
  vm.exec = (command, execOptions) => {
    if (typeof command !== "string" && command.includes("--attach")) seen.count += 1;
    return exec(command, execOptions);
  };
  return seen;
}

/** A logger that keeps its info lines. */
function keptLog(): { lines: string[]; logger: StartSupervisorOptions["logger"] } {
  const lines: string[] = [];
  return { lines, logger: { ...silentLogger, info: (line: string) => lines.push(line) } };
}

function options(extra: Partial<StartSupervisorOptions> = {}): StartSupervisorOptions {
  return {
    vm,
    workspace: dir,
    stateDir: join(dir, "state"),
    agentPath: join(dir, "agent", "sandbox_agent.pyz"),
    agentArgs: ["--shell", "/bin/sh"],
    ...extra,
  };
}

test("a guest without python3 gives GUEST_PYTHON_MISSING naming the tool", async () => {
  const error = await SupervisorClient.start(options({ python: "python3-not-installed" })).catch((e: unknown) => e);
  expect(isSupervisorError(error, "GUEST_PYTHON_MISSING")).toBe(true);
  expect((error as Error).message).toContain("python3-not-installed");
  expect(vm.running).toBe(0);
});

test("an agent that cannot prepare its state dir fails the start with the reason", async () => {
  const error = await SupervisorClient.start(options({ stateDir: "/proc/pisb-cannot-exist" })).catch((e: unknown) => e);
  expect(isSupervisorError(error, "AGENT_START_FAILED")).toBe(true);
  expect((error as Error).message).toContain("/proc/pisb-cannot-exist");
  await waitFor(() => vm.running === 0, 5_000, "agent exec to end");
});

test("start honours an abort before and during the start, leaving nothing running", async () => {
  const before = new AbortController();
  before.abort(new Error("not now"));
  await expect(SupervisorClient.start(options({ signal: before.signal }))).rejects.toThrow("not now");

  const during = new AbortController();
  const starting = SupervisorClient.start(options({ signal: during.signal }));
  setTimeout(() => during.abort(new Error("changed my mind")), 5);
  await expect(starting).rejects.toThrow("changed my mind");
  await waitFor(() => vm.running === 0, 5_000, "agent exec to end");
});

test("close is idempotent, stops what the agent ran, and later calls fail with AGENT_CLOSED", async () => {
  const client = await SupervisorClient.start(options());
  const pidFile = join(dir, "cmd.pid");
  await client.exec(`echo $$ > ${pidFile}; exec sleep 600`, { timeoutMs: 0 });
  const pid = Number((await waitFor(() => readFile(pidFile, "utf8").catch(() => undefined))).trim());
  expect(await processAlive(pid)).toBe(true);
  await Promise.all([client.close(), client.close()]);
  expect(client.closed).toBe(true);
  await expect(client.exec("true")).rejects.toMatchObject({ code: "AGENT_CLOSED" });
  expect(await processAlive(pid)).toBe(false);
  await waitFor(() => vm.running === 0, 5_000, "agent exec to end");
});

test("detach ends the channel but not the agent: a new client reattaches to the same agent and command", async () => {
  const client = await SupervisorClient.start(options());
  const pidFile = join(dir, "cmd.pid");
  await client.exec(`echo $$ > ${pidFile}; exec sleep 600`, { timeoutMs: 0 });
  const pid = Number((await waitFor(() => readFile(pidFile, "utf8").catch(() => undefined))).trim());
  await Promise.all([client.detach(), client.detach()]);
  expect(client.closed).toBe(true);
  await expect(client.exec("true")).rejects.toMatchObject({
    code: "AGENT_CLOSED",
    message: expect.stringContaining("detached"),
  });
  await waitFor(() => vm.running === 0, 5_000, "bridge exec to end");
  expect(await processAlive(pid)).toBe(true);
  expect(await processAlive(client.hello.pid)).toBe(true);

  const again = await SupervisorClient.start(options());
  expect(again.hello.pid).toBe(client.hello.pid);
  expect(again.hello.sessions).toBeGreaterThan(0);
  await again.close();
  expect(await processAlive(pid)).toBe(false);
  await waitFor(async () => !(await processAlive(client.hello.pid)), 5_000, "agent gone");
});

test("an agent that dies fails pending and later calls with AGENT_CLOSED", async () => {
  const client = await SupervisorClient.start(options());
  const waiting = client.exec("sleep 600", { timeoutMs: 60_000 });
  await new Promise((r) => setTimeout(r, 200));
  process.kill(client.hello.pid, "SIGKILL");
  await expect(waiting).rejects.toMatchObject({ code: "AGENT_CLOSED" });
  expect(client.closed).toBe(true);
  await expect(client.ping()).rejects.toMatchObject({ code: "AGENT_CLOSED" });
  await client.close();
  await waitFor(async () => !(await processAlive(client.hello.pid)), 5_000, "agent gone");
});

test("the kernel word for a start's options is the key its daemon's boot script starts under, and that daemon serves the next start", async () => {
  const { vm: _vm, ...placement } = options();
  const word = await agentBootArgument(placement);
  expect(word).toMatch(/^pi_sandbox\.agent=[0-9a-f]{32}$/);
  expect(await agentBootArgument({ ...placement, agentArgs: ["--shell", "/bin/bash"] })).not.toBe(word);
  expect(await agentBootArgument({ ...placement, workspace: join(dir, "other") })).not.toBe(word);

  const first = await SupervisorClient.start(options());
  expect(first.hello.boot).toBe(false);
  await first.close();
  await waitFor(async () => !(await processAlive(first.hello.pid)), 5_000, "agent gone");

  // What the image's init does at the next boot, with the word the host put on the kernel line.
  const script = join(dir, "state.boot");
  const key = word.slice("pi_sandbox.agent=".length);
  await new Promise<void>((resolve, reject) =>
    spawn("/bin/sh", [script, key], { stdio: "ignore", detached: true })
      .on("spawn", resolve)
      .on("error", reject)
      .unref(),
  );
  await waitFor(() => stat(join(dir, "state.sock")).catch(() => undefined), 10_000, "the boot daemon to listen");
  const bridges = countBridges();
  const log = keptLog();
  const next = await SupervisorClient.start(options({ logger: log.logger }));
  // In through the door the daemon left for this key: no bridge, no second Python start.
  expect(bridges.count).toBe(0);
  expect(log.lines.join("\n")).toMatch(/agent \S+ up \(started at boot, through its TCP door, python /);
  expect(next.hello).toMatchObject({ boot: true, sessions: 0 });
  expect(next.hello.pid).not.toBe(first.hello.pid);
  expect((await next.exec("echo $((6*7))")).output).toBe("42\n");
  await next.close();
});

test("a first boot's seed installs the agent and starts its daemon, only for the kernel word's key", async () => {
  const { vm: _vm, ...placement } = options();
  const word = await agentBootArgument(placement);
  const key = word.slice("pi_sandbox.agent=".length);
  const seed = await writeAgentSeed(join(dir, "seeds"), placement);
  expect(seed).toBe(join(dir, "seeds", key));
  expect(await writeAgentSeed(join(dir, "seeds"), placement)).toBe(seed); // the same files, rewritten whole
  const runSeed = (argument: string) =>
    new Promise<number | null>((resolve, reject) =>
      spawn("/bin/sh", [join(seed, "first-boot"), argument], { stdio: "ignore" })
        .on("exit", resolve)
        .on("error", reject),
    );
  const agentPath = placement.agentPath!;

  // Another key (a host that wants another agent or placement): nothing is installed or started.
  expect(await runSeed("0".repeat(32))).toBe(0);
  await expect(stat(agentPath)).rejects.toMatchObject({ code: "ENOENT" });

  // A disk with a stale agent: the seed's archive replaces it, and the daemon starts from it.
  await rm(join(dir, "agent"), { recursive: true, force: true });
  await new Promise<void>((resolve, reject) =>
    spawn("/bin/sh", ["-c", `mkdir -p "${join(dir, "agent")}" && echo stale > "${agentPath}"`])
      .on("exit", () => resolve())
      .on("error", reject),
  );
  await new Promise<void>((resolve, reject) =>
    spawn("/bin/sh", [join(seed, "first-boot"), key], { stdio: "ignore", detached: true })
      .on("spawn", resolve)
      .on("error", reject)
      .unref(),
  );
  await waitFor(() => stat(join(dir, "state.sock")).catch(() => undefined), 10_000, "the seeded daemon to listen");
  expect((await readFile(agentPath)).equals(await readFile(join(seed, "sandbox_agent.pyz")))).toBe(true);
  const installed = (await stat(agentPath)).mtimeMs;
  const bridges = countBridges();
  const client = await SupervisorClient.start(options());
  expect((await stat(agentPath)).mtimeMs).toBe(installed); // no install exec
  expect(bridges.count).toBe(0); // in through the door the daemon left
  expect(client.hello).toMatchObject({ boot: true, sessions: 0 });
  expect((await client.exec("echo $((6*7))")).output).toBe("42\n");
  // The daemon left its own boot script for later boots, under the same key.
  expect(await readFile(join(dir, "state.boot"), "utf8")).toContain(`[ "$1" = ${key} ] || exit 0`);
  await client.close();
});

test("writing a seed removes the seeds of other keys that nobody wrote for a day", async () => {
  const { vm: _vm, ...placement } = options();
  const seeds = join(dir, "seeds");
  const old = join(seeds, "a".repeat(32));
  const recent = join(seeds, "b".repeat(32));
  const other = join(seeds, "not-a-seed");
  for (const d of [old, recent, other]) await mkdir(d, { recursive: true });
  const twoDaysAgo = new Date(Date.now() - 2 * 24 * 60 * 60 * 1000);
  await utimes(old, twoDaysAgo, twoDaysAgo);
  await utimes(other, twoDaysAgo, twoDaysAgo);
  const seed = await writeAgentSeed(seeds, placement);
  expect((await readdir(seeds)).sort()).toEqual([seed.slice(seeds.length + 1), "b".repeat(32), "not-a-seed"].sort());
});

test("a seed holds the start lock while its daemon starts (a bridge waits for it), and runs it as a bridge would, with --boot", async () => {
  const { vm: _vm, ...placement } = options();
  const key = (await agentBootArgument(placement)).slice("pi_sandbox.agent=".length);
  const seed = await writeAgentSeed(join(dir, "seeds"), { ...placement, python: join(dir, "fake-python") });
  // A stand-in interpreter that reports whether the start lock is still held while it runs.
  const probe = join(dir, "lock-held");
  await writeFile(
    join(dir, "fake-python"),
    `#!/bin/sh\nif flock -n "${join(dir, "state.lock")}" true; then echo free; else echo held; fi > "${probe}"\necho "$@" >> "${probe}"\n`,
    { mode: 0o755 },
  );
  const other = (await agentBootArgument({ ...placement, python: join(dir, "fake-python") })).slice(17);
  expect(other).not.toBe(key);
  await new Promise((resolve, reject) =>
    spawn("/bin/sh", [join(seed, "first-boot"), other], { stdio: "ignore" })
      .on("exit", resolve)
      .on("error", reject),
  );
  const [held, args] = (await readFile(probe, "utf8")).split("\n");
  expect(held).toBe("held");
  expect(args).toMatch(
    /^-I -S -u -c import sys; .* --state-dir \S+ --workspace \S+ --shell \/bin\/sh --boot-key [0-9a-f]{32} --daemon --boot$/,
  );
});

test("a session moves from its bridge to the agent's TCP door; a later client comes in through it; a wrong token falls back to the bridge", async () => {
  const bridges = countBridges();
  const first = await SupervisorClient.start(options());
  // A bridge started the agent (after an install), then the session moved to the door and the
  // bridge's exec ended.
  const started = bridges.count;
  expect(started).toBeGreaterThan(0);
  expect(first.hello).toMatchObject({ sessions: 0 });
  await waitFor(() => vm.running === 0, 5_000, "the bridge exec to end");
  const door = first.hello.door!;
  expect(door).toEqual({ port: expect.any(Number), token: expect.stringMatching(/^[0-9a-f]{32}$/) });
  // A kept copy is read back with the hello's own checks.
  expect(agentDoorOf(JSON.parse(JSON.stringify(door)))).toEqual(door);
  for (const bad of [undefined, "x", { port: 0, token: door.token }, { port: 65536, token: door.token }]) {
    expect(agentDoorOf(bad)).toBeUndefined();
  }
  expect(agentDoorOf({ port: door.port, token: door.token.toUpperCase() })).toBeUndefined();
  await first.exec("sleep 600", { timeoutMs: 0 });
  await first.detach();
  await waitFor(() => vm.running === 0, 5_000, "bridge exec to end");

  const viaDoor = await SupervisorClient.start(options({ door }));
  expect(vm.running).toBe(0); // no bridge: the channel is the TCP stream
  expect(viaDoor.hello).toMatchObject({ pid: first.hello.pid, sessions: 2, door });
  expect((await viaDoor.exec("echo $((6*7))")).output).toBe("42\n");
  await viaDoor.detach();

  const log = keptLog();
  const wrong = await SupervisorClient.start(
    options({ door: { port: door.port, token: "0".repeat(32) }, logger: log.logger }),
  );
  expect(log.lines.join("\n")).toContain("the agent's door did not let in");
  // The door file the running agent left let it in instead, without a bridge.
  expect(bridges.count).toBe(started);
  expect(vm.running).toBe(0);
  expect(wrong.hello).toMatchObject({ pid: first.hello.pid, sessions: 3 });
  expect((await wrong.exec("echo $((6*7))")).output).toBe("42\n");
  await wrong.close();
});

test("a session keeps its bridge when the agent's door does not let in", async () => {
  await vm.close();
  // Every guest port dials a closed host port: the door the agent gives cannot be reached.
  vm = await createLocalGuestVm({ root: join(dir, "root"), portMap: () => 1 });
  const logged: string[] = [];
  const client = await SupervisorClient.start(
    options({ logger: { ...silentLogger, info: (line: string) => logged.push(line) } }),
  );
  expect(logged.join("\n")).toContain("the agent's door did not let in");
  expect(logged.join("\n")).toContain("keeping its exec bridge");
  expect(vm.running).toBe(1);
  expect((await client.exec("echo $((6*7))")).output).toBe("42\n");
  await client.close();
});

test("a door file is taken only while a daemon listens and when it is well formed", async () => {
  const { vm: _vm, ...placement } = options();
  const key = (await agentBootArgument(placement)).slice("pi_sandbox.agent=".length);
  const doorFile = join(dir, "state.door");
  // Something else listening where a stale file points: it must never hear from the host.
  const heard: string[] = [];
  const impostor = createServer((socket) => socket.on("data", (chunk) => heard.push(chunk.toString())));
  await new Promise<void>((resolve) => impostor.listen(0, "127.0.0.1", resolve));
  const port = (impostor.address() as AddressInfo).port;
  try {
    const first = await SupervisorClient.start(options());
    await first.close();
    await waitFor(async () => !(await processAlive(first.hello.pid)), 5_000, "agent gone");
    // Left by an earlier boot (no daemon listens now): the host bridges and starts a new agent.
    await writeFile(doorFile, `${key} ${port} ${"a".repeat(32)}\n`);
    const bridges = countBridges();
    const second = await SupervisorClient.start(options());
    expect(bridges.count).toBe(1);
    expect(second.hello).toMatchObject({ sessions: 0 });
    expect(second.hello.pid).not.toBe(first.hello.pid);
    await second.detach();

    // A daemon listens, but its file is not a door: ignored too.
    for (const junk of [
      `${key} 99999 ${"a".repeat(32)}\n`,
      `${key} ${port} x\n`,
      `${"f".repeat(32)} ${port} ${"a".repeat(32)}\n`,
    ]) {
      await writeFile(doorFile, junk);
      const again = await SupervisorClient.start(options());
      expect(again.hello).toMatchObject({ pid: second.hello.pid });
      await again.detach();
    }
    expect(bridges.count).toBe(4);
    expect(heard).toEqual([]);
  } finally {
    impostor.close();
  }
});

test("a door query the guest never answers gives way to the bridge when the start timeout runs out", async () => {
  await vm.close();
  // A guest whose flock never returns (broken, or made so by its root).
  const bin = join(dir, "bin");
  await mkdir(bin, { recursive: true });
  await writeFile(join(bin, "flock"), "#!/bin/sh\nexec sleep 600\n", { mode: 0o755 });
  vm = await createLocalGuestVm({
    root: join(dir, "root"),
    env: { ...process.env, PATH: `${bin}:${process.env.PATH}` },
  });
  const bridges = countBridges();
  const started = Date.now();
  const client = await SupervisorClient.start(options({ startTimeoutMs: 1_500 }));
  expect(Date.now() - started).toBeGreaterThanOrEqual(1_400);
  expect(bridges.count).toBeGreaterThan(0);
  expect((await client.exec("echo $((6*7))")).output).toBe("42\n");
  await client.close();
});
