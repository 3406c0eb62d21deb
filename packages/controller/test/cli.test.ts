// The CLI as a process and as an argv parser: each command builds its action, `call` answers in
// JSON, errors keep their code and hint, exec's argv quoting and exit codes, --help, completions.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { actionFromArgv } from "../src/cli/cli.js";

/** The action a command line builds (fails the test for help, version or completion). */
async function actionOf(argv: string[]): Promise<Record<string, unknown>> {
  const parsed = await actionFromArgv(argv);
  if (parsed.kind !== "action") throw new Error(`${argv.join(" ")} parsed as ${parsed.kind}`);
  return parsed.action;
}

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "cli-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function cli(...args: string[]) {
  return spawnSync(process.execPath, [CLI, ...args], {
    encoding: "utf8",
    env: { ...process.env, PI_SANDBOX_HOME: join(dir, "state") },
  });
}

test("call prints the JSON result on stdout and exits 0", () => {
  const out = cli("call", '{"action":"list"}');
  expect(out.status).toBe(0);
  expect(JSON.parse(out.stdout)).toEqual({ instances: [] });
});

test("call prints a typed error on stderr and exits 1", () => {
  const out = cli("call", '{"action":"inspect","name":"Bad"}');
  expect(out.status).toBe(1);
  expect(out.stdout).toBe("");
  expect(JSON.parse(out.stderr)).toEqual({
    error: expect.objectContaining({ code: "CONTROLLER_INVALID_NAME", hint: expect.any(String) }),
  });
});

test("an error from a lower layer keeps its code; its hint is printed on its own line, never in the message", () => {
  const missing = join(dir, "nope.yaml");
  const text = cli("create", "demo", "-c", missing);
  expect(text.status).toBe(1);
  expect(text.stderr).toBe(
    `error CONFIG_NOT_FOUND: no config file at ${missing}\n` +
      "hint: check the path, or create a sandbox.yaml there (the package README has an example)\n",
  );
  const json = cli("create", "demo", "-c", missing, "--json");
  expect(json.status).toBe(1);
  expect(JSON.parse(json.stderr)).toEqual({
    error: {
      name: "ControllerError",
      code: "CONFIG_NOT_FOUND",
      message: `no config file at ${missing}`,
      hint: "check the path, or create a sandbox.yaml there (the package README has an example)",
      details: { sourcePath: missing },
    },
  });
});

test("human commands print readable text; usage errors exit 2", () => {
  expect(cli("list").stdout).toBe("no instances\n");
  const help = cli("help");
  expect(help.stdout).toMatch(/usage: pi-sandbox/);
  expect(cli("help", "actions").stdout).toMatch(/- shell \(user only\)/);
  const bad = cli("frobnicate");
  expect(bad.status).toBe(2);
  expect(bad.stderr).toMatch(/unknown command frobnicate/);
});

test("subcommands map to actions", async () => {
  expect(await actionOf(["create", "demo", "-c", "sandbox.yaml"])).toEqual({
    action: "create",
    name: "demo",
    config: "sandbox.yaml",
    template: undefined,
  });
  expect(await actionOf(["exec", "demo", "-d", "--timeout", "500", "--", "ls", "-la"])).toMatchObject({
    action: "exec",
    cmd: "ls -la",
    timeoutMs: 500,
  });
  expect(await actionOf(["destroy", "web", "--confirm", "web", "--template"])).toEqual({
    action: "destroy",
    name: "web",
    confirm: "web",
    kind: "templates",
  });
  expect(await actionOf(["ssh", "demo", "alice"])).toEqual({
    action: "shell",
    name: "demo",
    user: "alice",
  });
});

test("call answers bad JSON with a coded JSON error; an option a command does not take is a usage error", () => {
  const bad = cli("call", "not json");
  expect(bad.status).toBe(1);
  expect(JSON.parse(bad.stderr)).toEqual({
    error: expect.objectContaining({ code: "CONTROLLER_BAD_INPUT", hint: expect.any(String) }),
  });
  const extra = cli("start", "demo", "-c", "x.yaml");
  expect(extra.status).toBe(2);
  expect(extra.stderr).toMatch(/^start has no option -c\n/);
  expect(cli("ls").stdout).toBe("no instances\n");
});

describe("exec", () => {
  test("several words after -- are one argv, each quoted for the guest shell; one word is a command line", async () => {
    const printf = await actionFromArgv(["exec", "demo", "--", "printf", "%s\\n", "a b"]);
    expect(printf).toEqual({
      kind: "action",
      action: expect.objectContaining({
        action: "exec",
        name: "demo",
        cmd: "printf '%s\\n' 'a b'",
        timeoutMs: undefined,
      }),
      json: false,
      run: { kind: "follow", timeoutMs: undefined },
    });
    expect(await actionOf(["exec", "demo", "--", "sh", "-c", "echo 'it''s'; exit 7"])).toMatchObject({
      cmd: "sh -c 'echo '\\''it'\\'''\\''s'\\''; exit 7'",
    });
    expect(await actionOf(["exec", "demo", "--", "ls -la | wc -l"])).toMatchObject({ cmd: "ls -la | wc -l" });
    // In the first place an assignment or a keyword would be shell syntax; docker runs a program of that name.
    expect(await actionOf(["exec", "demo", "--", "A=1", "env"])).toMatchObject({ cmd: "'A=1' env" });
    expect(await actionOf(["exec", "demo", "--", "if", "true"])).toMatchObject({ cmd: "'if' true" });
    expect(await actionOf(["exec", "demo", "--", "echo", "", "~", "$HOME", "*"])).toMatchObject({
      cmd: "echo '' '~' '$HOME' '*'",
    });
  });

  test("options: -w, repeated -e, -d with and without --timeout; --timeout alone bounds the follow", async () => {
    expect(
      await actionFromArgv(["exec", "demo", "-w", "src", "-e", "A=1", "--env", "B=x=y", "-e", "C=", "--", "env"]),
    ).toMatchObject({
      action: { cwd: "src", env: { A: "1", B: "x=y", C: "" }, cmd: "env" },
      run: { kind: "follow" },
    });
    expect(await actionFromArgv(["exec", "-d", "demo", "--", "sleep", "100"])).toMatchObject({
      action: { timeoutMs: 0 },
      run: undefined,
    });
    expect(await actionFromArgv(["exec", "demo", "--timeout", "90000", "--", "make"])).toMatchObject({
      action: { timeoutMs: undefined },
      run: { kind: "follow", timeoutMs: 90000 },
    });
  });

  test("usage errors exit 125 (docker's code for exec's own failures) with the command's usage; bad env names are the action's coded error", () => {
    const noCommand = cli("exec", "demo");
    expect(noCommand.status).toBe(125);
    expect(noCommand.stderr).toMatch(/^exec needs a command after --\n\nusage: pi-sandbox exec <name> .*-- <command>/);
    expect(noCommand.stderr).not.toMatch(/usage: pi-sandbox <command>/);
    const badEnv = cli("exec", "demo", "-e", "NOVALUE", "--", "true");
    expect(badEnv.status).toBe(125);
    expect(badEnv.stderr).toMatch(/--env takes NAME=value; got NOVALUE/);
    const badName = cli("exec", "demo", "-e", "1X=2", "--json", "--", "true");
    expect(badName.status).toBe(125);
    expect(JSON.parse(badName.stderr)).toEqual({
      error: expect.objectContaining({ code: "CONTROLLER_BAD_INPUT", message: expect.stringMatching(/env\.1X/) }),
    });
  });
});

test("--version prints the controller package's version", () => {
  const manifest = JSON.parse(readFileSync(fileURLToPath(new URL("../package.json", import.meta.url)), "utf8")) as {
    version: string;
  };
  const out = cli("--version");
  expect(out.status).toBe(0);
  expect(out.stdout).toBe(`pi-sandbox ${manifest.version}\n`);
});

test("each command has its own --help: its usage, notes, options and the action's arguments", () => {
  const exec = cli("exec", "--help");
  expect(exec.status).toBe(0);
  expect(exec.stdout).toMatch(
    /^usage: pi-sandbox exec <name> \[-w dir\] \[-e K=V\]… \[--env-file f\] \[-u user\] \[-d\] \[-i\] \[-t\] -- <command> \[args…\]\n/,
  );
  expect(exec.stdout).toMatch(/Guest stdout goes to stdout and stderr to stderr/);
  expect(exec.stdout).toMatch(/^ {2}-e, --env <NAME=value> \(repeatable\) +set a variable$/m);
  expect(exec.stdout).toMatch(/^ {2}env \(optional\): NAME -> string/m);
  expect(exec.stdout).not.toMatch(/sandbox\.yaml keys/);
  expect(cli("help", "exec").stdout).toBe(exec.stdout);
  const ssh = cli("ssh", "-h");
  expect(ssh.stdout).toMatch(/^usage: pi-sandbox shell <name> \[user\] \[--print\]\nalias: ssh\n/);
  // Commands that shared a usage line have their own now.
  expect(cli("stop", "--help").stdout).toMatch(/^usage: pi-sandbox stop <name>…\n/);
  expect(cli("exec-kill", "--help").stdout).toMatch(/^usage: pi-sandbox exec-kill <name> <handle>\n/);
  expect(cli("write", "--help").stdout).toMatch(/^usage: pi-sandbox write <name> <guest-path>/);
  expect(cli("help", "frobnicate").status).toBe(2);
});

describe("completion", () => {
  test("bash: commands, aliases and each command's options from the action modules", () => {
    const script = cli("completion", "bash");
    expect(script.status).toBe(0);
    const complete = (...words: string[]) => {
      const run = spawnSync(
        "bash",
        [
          "-c",
          `${script.stdout}\nCOMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _pi_sandbox; printf '%s\\n' "\${COMPREPLY[@]}"`,
          "bash",
          ...words,
        ],
        { encoding: "utf8" },
      );
      expect(run.stderr).toBe("");
      return run.stdout.split("\n").filter(Boolean).sort();
    };
    expect(complete("pi-sandbox", "ex")).toEqual(["exec", "exec-kill", "exec-status"]);
    expect(complete("pi-sandbox", "s")).toEqual(["secrets", "services", "shell", "ssh", "start", "stop", "suspend"]);
    expect(complete("pi-sandbox", "--v")).toEqual(["--version"]);
    expect(complete("pi-sandbox", "exec", "demo", "--")).toEqual([
      "--cwd",
      "--detach",
      "--env",
      "--env-file",
      "--help",
      "--interactive",
      "--json",
      "--timeout",
      "--tty",
      "--user",
    ]);
    expect(complete("pi-sandbox", "ssh", "demo", "--p")).toEqual(["--print"]);
    expect(complete("pi-sandbox", "completion", "")).toEqual(["bash", "fish", "zsh"]);
    // After -- the words are the guest command's: nothing from pi-sandbox.
    expect(complete("pi-sandbox", "exec", "demo", "--", "--")).toEqual([]);
  });

  test("bash: instance names after a command, template names after create -t, and NAME: in cp's arguments", async () => {
    // A stand-in pi-sandbox: two instances and one template, as list -q prints them.
    const fake = join(dir, "fake-pi-sandbox");
    await writeFile(
      fake,
      '#!/bin/sh\n[ "$1 $2 $3" = "list -q --templates" ] && { echo base; exit 0; }\n[ "$1 $2" = "list -q" ] && printf "demo\\nother\\n"\n',
      { mode: 0o755 },
    );
    const script = cli("completion", "bash").stdout;
    const complete = (...words: string[]) => {
      const run = spawnSync(
        "bash",
        [
          "-c",
          `cd "$1"; shift; ${script}\nCOMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _pi_sandbox; printf '%s\\n' "\${COMPREPLY[@]}"`,
          "bash",
          dir,
          fake,
          ...words,
        ],
        { encoding: "utf8" },
      );
      expect(run.stderr).toBe("");
      return run.stdout.split("\n").filter(Boolean).sort();
    };
    expect(complete("stop", "")).toEqual(["demo", "other"]);
    expect(complete("create", "web", "-t", "")).toEqual(["base"]);
    expect(complete("create", "web", "--from", "b")).toEqual(["base"]);
    expect(complete("cp", "d")).toEqual(["demo:"]);
    expect(complete("cp", "fake")).toEqual(["fake-pi-sandbox"]);
    // After NAME: (bash splits the word at :) comes a guest path: no names.
    expect(complete("cp", "demo", ":", "")).toEqual([]);
  });

  test("fish: commands with descriptions, each command's flags described, template and instance names", () => {
    const fish = cli("completion", "fish");
    expect(fish.status).toBe(0);
    expect(fish.stdout).toMatch(/^# fish completion for pi-sandbox/);
    expect(fish.stdout).toContain(
      "complete -c pi-sandbox -n 'not __pi_sandbox_cmd' -a 'exec' -d 'run a command in a guest login shell; returns output, or a handle if still running'",
    );
    expect(fish.stdout).toContain(
      "complete -c pi-sandbox -n '__pi_sandbox_using exec; and not __pi_sandbox_dashdash' -s w -l cwd -r -d 'working directory, relative to the workspace'",
    );
    expect(fish.stdout).toContain(
      "complete -c pi-sandbox -n '__pi_sandbox_using create; and not __pi_sandbox_dashdash' -s t -l from -x -a '(__pi_sandbox_list --templates)'",
    );
    expect(fish.stdout).toContain(
      "complete -c pi-sandbox -n '__pi_sandbox_using stop; and __pi_sandbox_first' -a '(__pi_sandbox_list)'",
    );
    expect(fish.stdout).toMatch(
      /-n '__pi_sandbox_using upload cp' -F -a '\(__pi_sandbox_list \| string replace -r "\\\$" ":"\)'/,
    );
    expect(fish.stdout).toContain(
      "-d 'one line per entry from a template such as \\'{{.Name}} {{.State}}\\', or json (see below)'",
    );
  });

  test("zsh: a #compdef script with the same commands and options; an unknown shell is a usage error", () => {
    const zsh = cli("completion", "zsh");
    expect(zsh.status).toBe(0);
    expect(zsh.stdout).toMatch(/^#compdef pi-sandbox\n/);
    expect(zsh.stdout).toContain(
      "'exec:run a command in a guest login shell; returns output, or a handle if still running'",
    );
    expect(zsh.stdout).toMatch(
      /^ {4}exec\) opts=\(--cwd -w --env -e --env-file --user -u --detach -d --interactive -i --tty -t --timeout --json --help\); names=1; tmpl=\(\); remote=0 ;;$/m,
    );
    expect(zsh.stdout).toMatch(/^ {4}shell\|ssh\) /m);
    expect(zsh.stdout).toMatch(/^ {4}create\) .*; tmpl=\(-t --from\); remote=0 ;;$/m);
    expect(zsh.stdout).toMatch(/^ {4}upload\|cp\) .*; remote=1 ;;$/m);
    expect(zsh.stdout).toContain(`compadd -S ':' -- \${(f)"$(\${words[1]} list -q 2>/dev/null)"}`);
    const tcsh = cli("completion", "tcsh");
    expect(tcsh.status).toBe(2);
    expect(tcsh.stderr).toMatch(/completion knows bash, zsh and fish, not tcsh/);
  });
});
