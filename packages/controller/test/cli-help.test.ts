// The CLI's help as people meet it (issue #28 section 5): a short overview, the full reference
// behind `help actions`, a described line for every flag, and "did you mean" for typos. No VM.
import { renderHelp } from "../src/client/index.js";
import { actionFromArgv } from "../src/cli/cli.js";
import { cliActions, commandHelp, synopsis } from "../src/cli/help-text.js";
import { suggestions } from "../src/cli/suggest.js";
import { cliProcess } from "./support/cli-process.js";

const { cli } = cliProcess("cli-help-");

describe("the overview", () => {
  test("--help, help and no arguments print one overview of at most 45 lines naming every command", () => {
    const help = cli("--help");
    expect(help.status).toBe(0);
    // One screen of a 50-line terminal, with the command typed and the next prompt.
    expect(help.stdout.split("\n").length - 1).toBeLessThanOrEqual(45);
    expect(help.stdout).toMatch(/^pi-sandbox: named local dev environments/);
    expect(help.stdout).toMatch(/^Instances:$/m);
    expect(help.stdout).toMatch(/pi-sandbox help actions/);
    for (const spec of cliActions()) {
      const word = synopsis(spec.cli).split(" ")[0]!;
      // First on its row, or after the other words of a shared row (`read, write`).
      const listed = new RegExp(`^ {2}([a-z-]+, )*${word}\\b`, "m").test(help.stdout);
      expect({ word, listed }).toEqual({ word, listed: true });
    }
    expect(help.stdout).toMatch(/^ {2}completion +print a shell completion script$/m);
    expect(help.stdout).not.toMatch(/unknown keys are errors/);
    expect(cli("help").stdout).toBe(help.stdout);
    expect(cli().stdout).toBe(help.stdout);
  });

  test("help actions prints the full reference, the same text the Pi tool's help returns plus the user-only actions", () => {
    const actions = cli("help", "actions");
    expect(actions.status).toBe(0);
    expect(actions.stdout).toBe(`${renderHelp({ includeUserOnly: true })}\n`);
    expect(actions.stdout).toMatch(/- shell \(user only\)/);
    // The model's help is the action's result, unchanged by the CLI's overview.
    expect(JSON.parse(cli("call", '{"action":"help"}').stdout)).toEqual({ help: renderHelp() });
    expect(JSON.parse(cli("help", "--json").stdout)).toEqual({ help: renderHelp() });
  });
});

describe("one command's --help", () => {
  test("every flag of every command has a one-line description", () => {
    for (const spec of cliActions()) {
      const help = commandHelp(spec);
      for (const [long, option] of Object.entries(spec.cli.options ?? {})) {
        expect({ command: spec.name, long, description: option.description.trim() }).not.toMatchObject({
          description: "",
        });
        expect(option.description).not.toMatch(/\n/);
        const flag = `${option.short ? `-${option.short}, ` : ""}--${long}`;
        expect(help).toMatch(
          new RegExp(`^ {2}${flag}\\b.* {3,}${option.description.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`, "m"),
        );
      }
      expect(help).toMatch(/^ {2}--json +print the result, or the error, as JSON$/m);
    }
    expect(cli("logs", "--help").stdout).toMatch(/^ {2}-n, --lines <N> +how many of the last lines to show first$/m);
  });

  test("cp --help covers both directions: the upload's and the download's arguments", () => {
    const cp = cli("cp", "--help");
    expect(cp.status).toBe(0);
    expect(cp.stdout).toMatch(/^copy host files or directories into the guest/m);
    expect(cp.stdout).toMatch(/^or: copy guest files or directories to the host/m);
    expect(cp.stdout).toMatch(/pi-sandbox call '\{"action":"upload",…\}'/);
    expect(cp.stdout).toMatch(/pi-sandbox call '\{"action":"download",…\}'/);
    expect(cp.stdout).toMatch(/^ {2}from: guest paths, absolute or relative to the workspace$/m);
    expect(cp.stdout).not.toMatch(/^alias: cp$/m);
  });

  test("completion --help explains each shell and exits 0; completion without a shell is a usage error", () => {
    const help = cli("completion", "--help");
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^usage: pi-sandbox completion bash\|zsh\|fish\n/);
    expect(help.stdout).toMatch(/fish: +pi-sandbox completion fish \| source/);
    expect(cli("help", "completion").stdout).toBe(help.stdout);
    const bare = cli("completion");
    expect(bare.status).toBe(2);
    expect(bare.stderr).toMatch(/^completion needs a shell: bash, zsh and fish\n/);
  });
});

describe("did you mean", () => {
  test("an unknown command names the closest commands and exits 2", () => {
    const typo = cli("exce", "demo");
    expect(typo.status).toBe(2);
    expect(typo.stderr).toMatch(/^unknown command exce; did you mean exec\?\n/);
    expect(cli("help", "destory").stderr).toMatch(/^unknown command destory; did you mean destroy\?\n/);
    expect(cli("imgae").stderr).toMatch(/did you mean image\?/);
    expect(cli("image", "buidl").stderr).toMatch(/\(not buidl; did you mean build\?\)/);
    expect(cli("frobnicate").stderr).toMatch(/^unknown command frobnicate\n/);
  });

  test("an unknown flag names the closest flags of that command, and exec's usage error still exits 125", async () => {
    await expect(actionFromArgv(["logs", "demo", "--folow"])).rejects.toThrow(
      "logs has no option --folow; did you mean --follow?",
    );
    await expect(actionFromArgv(["ls", "--quite"])).rejects.toThrow("did you mean --quiet?");
    await expect(actionFromArgv(["start", "demo", "--frobnicate"])).rejects.toThrow(
      /^start has no option --frobnicate$/,
    );
    const exec = cli("exec", "demo", "--detahc", "--", "true");
    expect(exec.status).toBe(125);
    expect(exec.stderr).toMatch(/^exec has no option --detahc; did you mean --detach\?\n\nusage: pi-sandbox exec /);
  });

  test("suggestions are small edits or a prefix, best first, and nothing when no word is close", () => {
    expect(suggestions("stpo", ["stop", "start", "suspend"])).toEqual(["stop"]);
    expect(suggestions("ex", ["exec", "exec-kill", "list"])).toEqual(["exec", "exec-kill"]);
    expect(suggestions("--tempalte", ["--template", "--templates", "--json"])).toEqual(["--template", "--templates"]);
    expect(suggestions("zzz", ["exec", "list"])).toEqual([]);
  });
});
