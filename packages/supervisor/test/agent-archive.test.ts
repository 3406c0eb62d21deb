// The guest agent's zipapp carries its modules compiled (agent/build.py): zipimport cannot write a
// bytecode cache, so without them every agent start compiled the whole agent in the guest.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { agentArchivePath, readAgentArchive } from "../src/index.js";

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
