// The guest agent's zipapp carries its modules compiled (agent/build.py): zipimport cannot write a
// bytecode cache, so without them every agent start compiled the whole agent in the guest. The host
// runs the archive through a loader line, and so does the bridge when it starts the daemon.
import { execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { once } from "node:events";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { promisify } from "node:util";
import { agentArchivePath, readAgentArchive } from "../src/index.js";
import { AGENT_LOADER, launchCommand } from "../src/launch.js";

const run = promisify(execFile);

// Prints, for each module of the archive, where the code of its first function came from: a .pyc
// holds the relative name it was compiled with, a source compiled at import the archive's path.
const PROBE = `import importlib, inspect, sys, zipfile
archive = sys.argv[1]
sys.path.insert(0, archive)
names = sorted(n[:-3].replace("/", ".") for n in zipfile.ZipFile(archive).namelist()
               if n.startswith("pi_sandbox_agent/") and n.endswith(".py") and not n.endswith("__main__.py"))
for name in names:
    module = importlib.import_module(name)
    functions = [f for f in vars(module).values() if inspect.isfunction(f) and f.__module__ == name]
    if functions:
        print(name, functions[0].__code__.co_filename)
`;

test("the agent archive holds every module compiled, and a Python of the build's version loads them instead of compiling", async () => {
  await readAgentArchive(); // builds it when the sources changed
  const { stdout } = await run("python3", ["-S", "-c", PROBE, agentArchivePath()]);
  const lines = stdout.trim().split("\n");
  expect(lines.length).toBeGreaterThan(10);
  for (const line of lines) {
    const [name, file] = line.split(" ");
    expect(file).toBe(`${name!.replace(/\./g, "/")}.py`);
  }
});

test("the host's launch line runs the archive's bridge and its daemon the same way, never importing from the working directory", async () => {
  const dir = mkdtempSync(join(tmpdir(), "agent-loader-"));
  // A guest user's modules in the directory the root agent starts in: the bridge imports fcntl to
  // start the daemon, the daemon json.
  for (const name of ["fcntl", "json"])
    writeFileSync(join(dir, `${name}.py`), `open(${JSON.stringify(join(dir, "imported"))}, "w").close()\n`);
  const args = ["--state-dir", join(dir, "state"), "--workspace", join(dir, "ws"), "--cgroup-root", "none"];
  // The exec the host sends, with the archive's real hash: the launch script checks it, then
  // becomes the bridge.
  const sha256 = createHash("sha256")
    .update(await readAgentArchive())
    .digest("hex");
  const launch = { python: "python3", agentPath: agentArchivePath(), args: ["--attach", ...args] };
  const [shell, ...shellArgs] = launchCommand(launch, sha256);
  const bridge = spawn(shell!, shellArgs, { cwd: dir, stdio: ["pipe", "pipe", "inherit"] });
  let daemonPid: number | undefined;
  try {
    const [line] = (await once(createInterface({ input: bridge.stdout }), "line")) as [string];
    const hello = JSON.parse(line) as { event: string; data: { pid: number } };
    expect(hello.event).toBe("hello");
    daemonPid = hello.data.pid;
    expect(daemonPid).not.toBe(bridge.pid);
    const cmdline = readFileSync(`/proc/${daemonPid}/cmdline`, "utf8").split("\0");
    expect(cmdline.slice(1, 6)).toEqual(["-I", "-S", "-u", "-c", AGENT_LOADER]);
    expect(cmdline).toContain("--daemon");
    expect(existsSync(join(dir, "imported"))).toBe(false);
  } finally {
    bridge.kill("SIGKILL");
    if (daemonPid) process.kill(daemonPid, "SIGTERM");
    rmSync(dir, { recursive: true, force: true });
  }
});
