// `pi-sandbox exec` and `shell` as docker exec / limactl shell, through the real CLI and one real
// instance for the whole file: exit codes, argv quoting, env, output streamed as it comes, no time
// limit, -d, Ctrl-C; shell on a terminal (util-linux `script` gives it one); progress and Ctrl-C
// of a long action. On the same instance, guest text never reaches a terminal raw: the guest
// writes terminal escape sequences (OSC 52 sets the clipboard, CSI 2J clears the screen) into its
// .sandbox.yaml, command output, a file and a service log, all read back through the CLI. Run
// after `npx tsc -p tsconfig.build.json` (the CLI and daemon run from dist/).
import { spawn, spawnSync } from "node:child_process";
import { chmod, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { makeSandbox, SEED_YAML, teardown, type Sandbox } from "../src/testing.js";

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
const NAME = "cx";

let sandbox: Sandbox;
/** An exec longer than the action's 60 s cap, started at the top of the file. */
let pastTheCap: Promise<CliRun>;

interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** ms since spawn at which each stdout chunk arrived. */
  chunks: { at: number; text: string }[];
  /** ms since spawn at which the process closed. */
  closedAt: number;
}

/**
 * Runs `pi-sandbox …args`, feeding it `stdin`; `onStdout` sees the child and all stdout so far
 * after each chunk.
 */
function cli(
  args: string[],
  onStdout?: (child: ReturnType<typeof spawn>, stdout: string) => void,
  stdin = "",
): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const child = spawn(process.execPath, [CLI, ...args], { cwd: sandbox.dir, env: sandbox.env });
    const run: CliRun = { code: null, stdout: "", stderr: "", chunks: [], closedAt: 0 };
    child.stdout.setEncoding("utf8").on("data", (text: string) => {
      run.stdout += text;
      run.chunks.push({ at: Date.now() - started, text });
      onStdout?.(child, run.stdout);
    });
    child.stderr.setEncoding("utf8").on("data", (text: string) => (run.stderr += text));
    child.stdin.end(stdin);
    child.once("error", reject);
    child.once("close", (code) => {
      run.code = code;
      run.closedAt = Date.now() - started;
      resolve(run);
    });
  });
}

/**
 * Runs `pi-sandbox …args` on a pseudo-terminal (util-linux `script`), typing `input` once `ready`
 * matches what the terminal shows. The terminal merges stdout and stderr, with CRLF line ends.
 */
function onTerminal(args: string[], ready: RegExp, input: string): Promise<{ code: number | null; screen: string }> {
  const quote = (word: string) => `'${word.replace(/'/g, "'\\''")}'`;
  return new Promise((resolve, reject) => {
    const command = [process.execPath, CLI, ...args].map(quote).join(" ");
    const child = spawn("script", ["-qefc", command, "/dev/null"], { cwd: sandbox.dir, env: sandbox.env });
    let screen = "";
    let typed = false;
    child.stdout.setEncoding("utf8").on("data", (text: string) => {
      screen += text;
      if (!typed && ready.test(screen)) {
        typed = true;
        // Left open: at EOF on its input, script would end the session itself.
        child.stdin.write(input);
      }
    });
    child.stderr.setEncoding("utf8").on("data", (text: string) => (screen += text));
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, screen }));
  });
}

/** ESC, BEL and the C1 CSI: none may reach stdout or stderr. */
const TERMINAL_CONTROL = /[\u001b\u0007\u009b]/;

/** Runs the CLI (`stdin` fed to it) and checks that nothing a terminal would act on came out. */
async function clean(args: string[], stdin = ""): Promise<CliRun> {
  const out = await cli(args, undefined, stdin);
  expect(out.stdout).not.toMatch(TERMINAL_CONTROL);
  expect(out.stderr).not.toMatch(TERMINAL_CONTROL);
  return out;
}

beforeAll(async () => {
  sandbox = await makeSandbox("cx-");
  await sandbox.writeConfig(SEED_YAML);
  const created = await sandbox.call({ action: "create", name: NAME, config: "sandbox.yaml" });
  expect(created.state).toBe("running");
  // Started now, checked later: its 65 s pass while the other cases run on the same instance.
  pastTheCap = cli(["exec", NAME, "--", "sh", "-c", "sleep 65; echo done"]);
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

test("exits with the command's exit code", async () => {
  const no = await cli(["exec", NAME, "--", "false"]);
  expect(no).toMatchObject({ code: 1, stdout: "", stderr: "" });
  expect((await cli(["exec", NAME, "--", "sh", "-c", "exit 7"])).code).toBe(7);
  // A signal N is 128+N, as a shell reports it.
  expect((await cli(["exec", NAME, "--", "sh", "-c", "kill -TERM $$"])).code).toBe(143);
  // docker's codes: 127 not found, 126 cannot run (the guest shell's), 125 pi-sandbox's own failure.
  expect((await cli(["exec", NAME, "--", "no-such-command-28"])).code).toBe(127);
  expect((await cli(["exec", NAME, "--", "/etc/passwd"])).code).toBe(126);
  expect((await cli(["exec", `${NAME}-missing`, "--", "true"])).code).toBe(125);
});

test("several words are an argv, one word a command line; -e and -w reach the command", async () => {
  expect(await cli(["exec", NAME, "--", "printf", "%s\\n", "a b"])).toMatchObject({ code: 0, stdout: "a b\n" });
  expect((await cli(["exec", NAME, "--", "echo one; echo two | tr a-z A-Z"])).stdout).toBe("one\nTWO\n");
  await cli(["exec", NAME, "--", "mkdir", "-p", "sub dir"]);
  const env = await cli([
    "exec",
    NAME,
    "-e",
    "GREETING=hi there",
    "-w",
    "sub dir",
    "--",
    "sh",
    "-c",
    'echo "$GREETING"; pwd',
  ]);
  expect(env).toMatchObject({ code: 0, stdout: "hi there\n/workspace/sub dir\n" });
});

test("--json prints one result at the end, with all the output", async () => {
  const run = await cli(["exec", NAME, "--json", "--", "sh", "-c", "echo a; sleep 2; echo b; exit 4"]);
  expect(run.code).toBe(4);
  expect(JSON.parse(run.stdout)).toMatchObject({ running: false, exitCode: 4, output: "a\nb\n", truncatedBytes: 0 });
});

test("output is streamed: a line printed before a sleep arrives well before the command ends", async () => {
  const run = await cli(["exec", NAME, "--", "sh", "-c", "echo first; sleep 8; echo second"]);
  expect(run).toMatchObject({ code: 0, stdout: "first\nsecond\n" });
  const first = run.chunks.find((chunk) => chunk.text.includes("first"))!;
  expect(first.text).not.toContain("second");
  expect(run.closedAt - first.at).toBeGreaterThan(5_000);
});

test("-d returns a handle at once; the command runs on", async () => {
  const run = await cli(["exec", NAME, "-d", "--json", "--", "sleep", "1234"]);
  expect(run.code).toBe(0);
  const view = JSON.parse(run.stdout) as { pid: string; running: boolean };
  expect(view.running).toBe(true);
  expect((await cli(["exec", NAME, "--", "pgrep", "-f", "sleep 123[4]"])).code).toBe(0);
  const text = await cli(["exec", NAME, "-d", "--", "sleep", "1235"]);
  expect(text.stdout).toMatch(new RegExp(`^\\[still running; follow with: pi-sandbox exec-status ${NAME} \\S+\\]\\n$`));
  for (const pid of [view.pid, new RegExp(`exec-status ${NAME} (\\S+)\\]`).exec(text.stdout)![1]!]) {
    expect((await cli(["exec-kill", NAME, pid])).code).toBe(0);
  }
});

test("Ctrl-C ends the guest command's process group and exits 130", async () => {
  let interrupted = false;
  const run = await cli(["exec", NAME, "--", "sh", "-c", "echo started; sleep 4321; echo never"], (child, stdout) => {
    if (!interrupted && stdout.includes("started")) {
      interrupted = true;
      child.kill("SIGINT");
    }
  });
  expect(run.code).toBe(130);
  expect(run.stdout).not.toContain("never");
  expect(run.stderr).toMatch(/interrupted: ending the command/);
  // pgrep exits 1 when nothing matches; the bracket keeps it from matching its own shell.
  expect((await cli(["exec", NAME, "--", "pgrep", "-f", "sleep 432[1]"])).code).toBe(1);
});

test("shell runs ssh on a terminal and exits with the session's code; without one it prints the command", async () => {
  const printed = await cli(["shell", NAME]);
  expect(printed.code).toBe(0);
  expect(printed.stdout).toMatch(/^ssh -p \d+ .*root@127\.0\.0\.1\n$/);
  expect((await cli(["ssh", NAME, "--print"])).stdout).toMatch(/^ssh -p \d+ /);
  const session = await onTerminal(["shell", NAME], /#|\$/, "echo $((6 * 7)); exit 3\r");
  expect(session.screen).toMatch(/^42\r?$/m);
  expect(session.code).toBe(3);
});

test("bash completion offers the instance names", async () => {
  const wrapper = join(sandbox.dir, "pi-sandbox");
  await writeFile(wrapper, `#!/bin/sh\nexec '${process.execPath}' '${CLI}' "$@"\n`);
  await chmod(wrapper, 0o755);
  const script = spawnSync(wrapper, ["completion", "bash"], { encoding: "utf8", env: sandbox.env }).stdout;
  const run = spawnSync(
    "bash",
    ["-c", `${script}\nCOMP_WORDS=("${wrapper}" exec ""); COMP_CWORD=2; _pi_sandbox; echo "\${COMPREPLY[@]}"`],
    { encoding: "utf8", env: sandbox.env },
  );
  expect(run.stdout).toBe(`${NAME}\n`);
});

// Guest text with terminal controls, on the same instance while the exec above runs past the cap.
// These leave a valid guest .sandbox.yaml with one more service (noisy), which the stop and start
// below take as they are.
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
  let logs: CliRun | undefined;
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

test("waits past the action's 60 s cap until the command ends", async () => {
  const run = await pastTheCap;
  expect(run).toMatchObject({ code: 0, stdout: "done\n", stderr: "" });
  expect(run.closedAt).toBeGreaterThan(65_000);
  // Its ~130 exec-status polls are not in the controller log.
  const log = await cli(["logs", NAME, "-n", "500"]);
  expect(log.stdout).toMatch(/action exec\n/);
  expect(log.stdout).not.toMatch(/action exec-status/);
});

test("long actions: --json progress lines on stderr; on a terminal elapsed seconds, and Ctrl-C leaves the work to the daemon", async () => {
  const stopped = await cli(["stop", NAME, "--json"]);
  expect(stopped.code).toBe(0);
  const lines = stopped.stderr.trim().split("\n");
  expect(lines.length).toBeGreaterThan(0);
  for (const line of lines) {
    expect(JSON.parse(line)).toEqual({ progress: { stage: expect.any(String), message: expect.any(String) } });
  }
  expect(JSON.parse(stopped.stdout)).toMatchObject({ state: "stopped" });

  // Ctrl-C typed on the terminal once the boot has begun.
  const start = await onTerminal(["start", NAME], /\[\d+\.\ds boot\] /, "\x03");
  expect(start.code).toBe(130);
  expect(start.screen).toMatch(
    new RegExp(
      `interrupted: pi-sandbox stopped waiting, but start of ${NAME} goes on in its controller; follow it with pi-sandbox inspect ${NAME} \\(state\\) and pi-sandbox logs ${NAME}`,
    ),
  );
  // The daemon finished the start on its own.
  const deadline = Date.now() + 300_000;
  let state = "";
  while (Date.now() < deadline && state !== "running") {
    state = ((await sandbox.call({ action: "inspect", name: NAME })) as { state: string }).state;
    if (state !== "running") await new Promise((r) => setTimeout(r, 1000));
  }
  expect(state).toBe("running");
});
