// The warm login shell: a bash started ahead of the next exec that reads the login files only once
// it has its command. These tests hold it to "indistinguishable from `bash -lc`", except for speed.
import { mkdir, mkdtemp, readdir, readFile, readlink, realpath, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { processAlive, startLocal, waitFor, type LocalSupervisor } from "./support/local.js";

let home: string;
let warm: LocalSupervisor;
let cold: LocalSupervisor;

const PROFILE = [
  'echo "profile ran in $PWD"',
  "export FROM_PROFILE=yes",
  "shopt -s expand_aliases",
  "alias hello='echo alias from the profile'",
  "",
].join("\n");

beforeAll(async () => {
  home = await mkdtemp(join(tmpdir(), "pisb-home-"));
  await writeFile(join(home, ".bash_profile"), PROFILE);
  const env = { ...process.env, HOME: home };
  warm = await startLocal({ env, agentArgs: ["--shell", "/bin/bash"] });
  cold = await startLocal({ env, agentArgs: ["--shell", "/bin/bash", "--warm-shell", "off"] });
});
afterAll(async () => {
  await warm?.close();
  await cold?.close();
  await rm(home, { recursive: true, force: true });
});

/**
 * Pids of the idle warm shells the agent keeps (children of the agent running the bootstrap) in
 * `cwd`. A shell in another directory may be on its way out: the agent replaces it when an exec
 * elsewhere asks for one there.
 */
async function idleWarmShells(sup: LocalSupervisor, cwd: string): Promise<number[]> {
  const found: number[] = [];
  const want = await realpath(cwd);
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = await readFile(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const cmdline = await readFile(`/proc/${entry}/cmdline`, "utf8");
      const here = await readlink(`/proc/${entry}/cwd`);
      if (ppid === sup.client.hello.pid && cmdline.includes("__pi_sandbox_n") && here === want) {
        found.push(Number(entry));
      }
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** The pid of the idle warm shell in `cwd` (default: the workspace), once there is one. */
const waitForWarmShell = (sup: LocalSupervisor, cwd = sup.workspace) =>
  waitFor(async () => (await idleWarmShells(sup, cwd))[0], 10_000, `a warm shell to be ready in ${cwd}`);

/** How the shell running a command was started, as `ps` would show it. */
const HOW_STARTED = "tr '\\0' ' ' </proc/$$/cmdline; echo";

test("hello says whether execs use a warm shell; /bin/sh never does", async () => {
  expect(warm.client.hello.warmShell).toBe(true);
  expect(cold.client.hello.warmShell).toBe(false);
  const sh = await startLocal({ agentArgs: ["--shell", "/bin/sh", "--warm-shell", "on"] });
  try {
    expect(sh.client.hello.warmShell).toBe(false);
  } finally {
    await sh.close();
  }
});

test("a command in the warm shell sees exactly what `bash -lc` shows it", async () => {
  const battery = [
    "hello",
    'echo "$0|$-|$LINENO|$SHLVL|$#|$FROM_PROFILE|$BASH_EXECUTION_STRING"',
    "shopt -p",
    "set -o",
    "env | sort",
    // Everything but what differs between any two shells (pids, clocks, randomness).
    "declare -p | grep -Ev '^declare -[-a-zA-Z]* (BASHPID|PPID|RANDOM|SRANDOM|EPOCHSECONDS|EPOCHREALTIME|SECONDS|_)(=|$)'",
    "trap -p; umask; ulimit -n",
    "[ -t 0 ] || echo stdin is not a terminal; ls -l /proc/$$/fd/0 | cut -c1-10; readlink /proc/$$/fd/0",
    '[ "$(ps -o pgid= $$ | tr -d " ")" = "$$" ] && echo leads its process group',
    "echo $((LINENO + 1)); if then",
  ].join("\n");
  await waitForWarmShell(warm);
  const [a, b] = await Promise.all([warm.client.exec(battery), cold.client.exec(battery)]);
  const norm = (text: string, sup: LocalSupervisor) => text.split(sup.root).join("<root>");
  // A syntax error names its source: `-c` for bash -c, `eval` for the warm shell (documented).
  const warmOutput = norm(a.output, warm).replace(/^(\/bin\/bash: )eval(: line \d+:)/gm, "$1-c$2");
  expect(warmOutput).toBe(norm(b.output, cold));
  expect(a.exitCode).toBe(b.exitCode);
  expect(a.output).toContain(`profile ran in ${warm.workspace}\n`);
  expect(a.output).toContain("alias from the profile");
  expect(a.output).toContain("leads its process group");
  // And it really was the warm shell on one side and a fresh `bash -lc` on the other (the warm
  // shell the battery used is replaced in the background: wait for the next one, as above).
  await waitForWarmShell(warm);
  const [howWarm, howCold] = await Promise.all([warm.client.exec(HOW_STARTED), cold.client.exec(HOW_STARTED)]);
  expect(howWarm.output).toContain("--noprofile -l -c read -r __pi_sandbox_n");
  expect(howCold.output).toContain("/bin/bash -lc tr");
});

test("login files are read when the command runs, not when the warm shell started", async () => {
  await warm.client.exec("true");
  await waitForWarmShell(warm);
  await writeFile(join(home, ".bash_profile"), `${PROFILE}export PROFILE_VERSION=2\n`);
  try {
    const result = await warm.client.exec(`echo "version $PROFILE_VERSION"; ${HOW_STARTED}`);
    expect(result.output).toContain("version 2\n");
    expect(result.output).toContain("__pi_sandbox_n");
  } finally {
    await writeFile(join(home, ".bash_profile"), PROFILE);
  }
});

test("exit codes, signals, exact command bytes and big commands", async () => {
  await waitForWarmShell(warm);
  expect(await warm.client.exec("exit 7")).toMatchObject({ exitCode: 7, running: false });
  await waitForWarmShell(warm);
  expect(await warm.client.exec("kill -TERM $$")).toMatchObject({ exitCode: 143, signal: "SIGTERM" });
  await waitForWarmShell(warm);
  const text = "héllo wörld ✓ \\ 'q' \"dq\" $HOME";
  const exact = await warm.client.exec(`printf '%s\\n' '${text.replace(/'/g, "'\\''")}'\n\n`);
  expect(exact.output.endsWith(`${text}\n`)).toBe(true);
  await waitForWarmShell(warm);
  const big = `# ${"x".repeat(300_000)}\necho big ok`;
  const started = Date.now();
  expect((await warm.client.exec(big)).output.endsWith("big ok\n")).toBe(true);
  expect(Date.now() - started).toBeLessThan(5_000);
});

test("a kill stops the whole group; output over 64 KiB is cut the same way", async () => {
  const pidFile = join(warm.root, "bg.pid");
  await waitForWarmShell(warm);
  const started = await warm.client.exec(`${HOW_STARTED}; sleep 300 & echo $! > ${pidFile}; sleep 300`, {
    timeoutMs: 500,
  });
  expect(started).toMatchObject({ running: true });
  expect(started.output).toContain("__pi_sandbox_n");
  const bgPid = Number((await readFile(pidFile, "utf8")).trim());
  const killed = await warm.client.execKill(started.handle);
  expect(killed).toMatchObject({ killed: true, running: false, signal: "SIGTERM", exitCode: 143 });
  await waitFor(async () => !(await processAlive(bgPid)), 5_000, "background child to die");

  await waitForWarmShell(warm);
  const long = await warm.client.exec(
    "echo HEAD-LINE; python3 -c \"import sys; sys.stdout.write('x' * 200000)\"; echo; echo TAIL-LINE",
  );
  expect(Buffer.byteLength(long.output)).toBeLessThanOrEqual(64 * 1024);
  expect(long.output).toMatch(/^profile ran in .*\nHEAD-LINE\n/);
  expect(long.output.endsWith("TAIL-LINE\n")).toBe(true);
  expect(long.truncatedBytes).toBeGreaterThan(200_000 - 64 * 1024);
});

test("another cwd, a remade directory, extra env or a killed warm shell still run right", async () => {
  const app = join(warm.workspace, "app");
  await mkdir(app, { recursive: true });
  expect((await warm.client.exec("pwd", { cwd: "app" })).output).toBe(`profile ran in ${app}\n${app}\n`);
  // The next warm shell waits in app/; replace the directory under it.
  await waitForWarmShell(warm, app);
  await rm(app, { recursive: true });
  await mkdir(app);
  await writeFile(join(app, "marker"), "");
  expect((await warm.client.exec("ls", { cwd: "app" })).output).toBe(`profile ran in ${app}\nmarker\n`);

  const withEnv = await warm.client.exec('echo "$EXTRA|$FROM_PROFILE"', { env: { EXTRA: "given" } });
  expect(withEnv.output).toBe(`profile ran in ${warm.workspace}\ngiven|yes\n`);

  const idle = await waitForWarmShell(warm);
  process.kill(idle, "SIGKILL");
  await waitFor(async () => !(await processAlive(idle)), 5_000, "the warm shell to die");
  expect((await warm.client.exec("echo still fine")).output).toBe(`profile ran in ${warm.workspace}\nstill fine\n`);
});

test("closing the client leaves no warm shell behind", async () => {
  const sup = await startLocal({ env: { ...process.env, HOME: home }, agentArgs: ["--shell", "/bin/bash"] });
  try {
    await sup.client.exec("true");
    const idle = await waitForWarmShell(sup);
    await sup.client.close();
    await waitFor(async () => !(await processAlive(idle)), 5_000, "the warm shell to end");
    // The agent daemon answers shutdown before it has exited; give it a moment to go.
    const leftovers = async () => {
      const found: string[] = [];
      for (const entry of await readdir("/proc")) {
        const target = await readlink(`/proc/${entry}/fd/1`).catch(() => "");
        if (target.startsWith(sup.stateDir)) found.push(`${entry} -> ${target}`);
      }
      return found;
    };
    await waitFor(async () => (await leftovers()).length === 0, 5_000, "the agent's processes to end").catch(
      () => undefined,
    );
    expect(await leftovers()).toEqual([]);
    expect(await readdir(join(sup.stateDir, "exec"))).toEqual([]);
  } finally {
    await sup.close();
  }
});
