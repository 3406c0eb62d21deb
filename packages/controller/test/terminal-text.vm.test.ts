// Guest text never reaches a terminal raw, end to end: one real instance whose guest writes
// terminal escape sequences (OSC 52 sets the clipboard, CSI 2J clears the screen) into its
// .sandbox.yaml, command output, a file and a service log, all read back through the real CLI.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { makeSandbox, SEED_YAML, teardown, type Sandbox } from "../src/testing.js";

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
/** ESC, BEL and the C1 CSI: none may reach stdout or stderr. */
const TERMINAL_CONTROL = /[\u001b\u0007\u009b]/;
const NAME = "hostile";

let sandbox: Sandbox;

interface CliOutput {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `pi-sandbox …args` with the sandbox's state root, optionally feeding `stdin`. */
function cli(args: string[], stdin = ""): Promise<CliOutput> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: sandbox.dir, env: sandbox.env });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(stdin);
  });
}

/** Runs the CLI and checks that nothing a terminal would act on came out. */
async function clean(args: string[], stdin = ""): Promise<CliOutput> {
  const out = await cli(args, stdin);
  expect(out.stdout).not.toMatch(TERMINAL_CONTROL);
  expect(out.stderr).not.toMatch(TERMINAL_CONTROL);
  return out;
}

beforeAll(async () => {
  sandbox = await makeSandbox("esc-");
  await sandbox.writeConfig(SEED_YAML);
  const created = await sandbox.call({ action: "create", name: NAME, config: "sandbox.yaml" });
  expect(created.state).toBe("running");
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

test("a guest .sandbox.yaml whose preview title sets the clipboard is refused, and printed escaped", async () => {
  // YAML's own escapes: the parsed title holds ESC and BEL.
  const yaml = String.raw`version: 1
services:
  web:
    command: python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: { title: "x\e]52;c;aGk=\a\e[2Jz" }
`;
  expect((await clean(["write", NAME, "/workspace/.sandbox.yaml"], yaml)).code).toBe(0);

  const ensure = await clean(["services", NAME, "ensure"]);
  expect(ensure.code).toBe(1);
  expect(ensure.stderr).toMatch(
    /^error SUPERVISOR_GUEST_CONFIG_INVALID: \/workspace\/\.sandbox\.yaml is not a valid sandbox\.yaml/,
  );
  expect(ensure.stderr).toContain(
    '`services.web.preview.title` must not contain control characters (such as ESC, BEL or a line break); write plain text; got "x\\u001b]52;c;aGk=\\u0007\\u001b[2Jz" (line 6, column 23)',
  );

  const json = await clean(["services", NAME, "ensure", "--json"]);
  expect(json.code).toBe(1);
  const error = (JSON.parse(json.stderr) as { error: { code: string; details: { issues: { path: string }[] } } }).error;
  expect(error.code).toBe("SUPERVISOR_GUEST_CONFIG_INVALID");
  expect(error.details.issues.map((issue) => issue.path)).toEqual(["services.web.preview.title"]);

  const inspect = await clean(["inspect", NAME]);
  expect(inspect.code).toBe(0);
  expect(inspect.stdout).toMatch(/^state: {7}running$/m);
  // The previews opened at create stay; the refused YAML changed nothing.
  expect(inspect.stdout).toMatch(/^preview: {5}http:\/\/127(?:\.\d{1,3}){3}:\d+\/ {2}web$/m);
  expect((await clean(["inspect", NAME, "--json"])).code).toBe(0);
  const list = await clean(["list"]);
  expect(list.stdout).toMatch(new RegExp(`^${NAME} +running `, "m"));
});

test("raw escape bytes in the guest YAML are refused and printed escaped too", async () => {
  // printf writes real ESC and BEL bytes into the file, and a raw ESC into a key.
  const script = String.raw`printf 'version: 1\n\033[2J: 1\nservices:\n  web:\n    command: x\n    preview: { title: "a\033]52;c;aGk=\007" }\n' > /workspace/.sandbox.yaml`;
  expect((await clean(["exec", NAME, "--", script])).code).toBe(0);
  const ensure = await clean(["services", NAME, "ensure"]);
  expect(ensure.code).toBe(1);
  expect(ensure.stderr).toContain("`\\x1b[2J` is not a known key");
  expect(ensure.stderr).toContain('got "a\\u001b]52;c;aGk=\\u0007"');
  await clean(["inspect", NAME]);
  await clean(["list"]);
});

test("command output, a file and a service log carrying escape sequences are printed escaped", async () => {
  const evil = String.raw`out \033]52;c;aGk=\007\033[2J\302\233done\n`;
  const exec = await clean(["exec", NAME, "--", `printf '${evil}'`]);
  expect(exec.code).toBe(0);
  expect(exec.stdout).toBe("out \\x1b]52;c;aGk=\\x07\\x1b[2J\\u009bdone\n");
  // --json is still JSON of the exact output.
  const json = await clean(["exec", NAME, "--json", "--", `printf '${evil}'`]);
  expect((JSON.parse(json.stdout) as { output: string }).output).toBe(
    "out \u001b]52;c;aGk=\u0007\u001b[2J\u009bdone\n",
  );

  expect((await clean(["exec", NAME, "--", `printf '${evil}' > /tmp/evil.txt`])).code).toBe(0);
  const read = await clean(["read", NAME, "/tmp/evil.txt"]);
  expect(read.stdout).toBe("out \\x1b]52;c;aGk=\\x07\\x1b[2J\\u009bdone\n");

  // A valid guest YAML again, with a service that writes the sequence to its log.
  const yaml = String.raw`version: 1
services:
  web:
    command: python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
  noisy:
    command: "printf '\\033]52;c;aGk=\\007noise\\n'; exec sleep 600"
    health: process
`;
  expect((await clean(["write", NAME, "/workspace/.sandbox.yaml"], yaml)).code).toBe(0);
  const ensure = await clean(["services", NAME, "ensure"]);
  expect(ensure.code).toBe(0);
  let logs: CliOutput | undefined;
  for (let attempt = 0; attempt < 20; attempt++) {
    logs = await clean(["logs", NAME, "noisy"]);
    // The output itself, not the "started … printf …noise" line that announces the command.
    if (logs.stdout.includes("\\x1b]52")) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  expect(logs!.stdout).toContain("\\x1b]52;c;aGk=\\x07noise");

  // The controller log recorded the refused YAML; every entry is one line without raw controls.
  const controller = await clean(["logs", NAME, "-n", "500"]);
  expect(controller.stdout).toContain("SUPERVISOR_GUEST_CONFIG_INVALID");
});
