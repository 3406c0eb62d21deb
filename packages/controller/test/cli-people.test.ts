// The CLI as people meet it (issue #28, "A CLI that speaks to people"), driven as a process
// against an empty state directory: no VM.
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { actionFromArgv } from "../src/cli/cli.js";
import { confirmDestroy } from "../src/cli/confirm.js";
import { parseEnvFile } from "../src/actions/exec.js";
import type { EntryView } from "../src/state/inspect.js";
import { cliActions, positionalLimit } from "../src/cli/help-text.js";
import { cliProcess } from "./support/cli-process.js";

const { cli, dir } = cliProcess("cli-people-");

describe("a missing instance", () => {
  test.each([
    ["exec", "nope", "--", "ls"],
    ["shell", "nope"],
    ["logs", "nope"],
    ["services", "nope", "status"],
    ["stop", "nope"],
  ])("%s says it does not exist, not that it is not running", (...argv) => {
    const out = cli(...argv);
    expect(out.stderr).toBe(
      "error CONTROLLER_NOT_FOUND: no instance named nope\nhint: List instances with pi-sandbox list.\n",
    );
  });
});

describe("exit codes", () => {
  test("exec's own failures exit 125, as docker's: no such instance, a usage error", () => {
    expect(cli("exec", "nope", "--", "ls").status).toBe(125);
    expect(cli("exec", "nope").status).toBe(125);
    expect(cli("exec", "--frobnicate", "nope", "--", "ls").status).toBe(125);
  });

  test("other commands keep 1 for errors and 2 for usage", () => {
    expect(cli("logs", "nope").status).toBe(1);
    expect(cli("logs").status).toBe(2);
  });
});

describe("several names and extra arguments", () => {
  test("stop, start, rm and suspend act on each name, report each and fail if any failed", () => {
    for (const command of ["stop", "start", "rm -f", "suspend"]) {
      const out = cli(...command.split(" "), "nope-a", "nope-b");
      expect({ command, status: out.status }).toEqual({ command, status: 1 });
      expect(out.stderr).toMatch(/no instance named nope-a\n[^]*no instance named nope-b\n/);
    }
  });

  test("every other command refuses an extra argument with a usage error instead of dropping it", async () => {
    for (const spec of cliActions()) {
      const limit = positionalLimit(spec);
      if (spec.name === "help" || spec.cli.eachName || limit === undefined) continue;
      const words = [...spec.name.split(/(?<=^image)-/), ...Array.from({ length: limit + 1 }, (_, i) => `a${i}`)];
      await expect(actionFromArgv(words)).rejects.toThrow(`unexpected: a${limit}`);
    }
    const out = cli("inspect", "a", "b");
    expect(out.status).toBe(2);
    expect(out.stderr).toMatch(/^inspect takes at most 1; unexpected: b\n\nusage: pi-sandbox inspect <name>/);
  });
});

describe("destroy's confirmation", () => {
  test("-f confirms each name; off a terminal, without -f or --confirm, nothing is asked and destroy refuses", async () => {
    expect(await actionFromArgv(["rm", "-f", "demo"])).toMatchObject({ action: { confirm: "demo" } });
    const out = cli("destroy", "nope");
    expect(out.status).toBe(1);
    expect(out.stderr).toMatch(/^error CONTROLLER_CONFIRM_MISMATCH: .*\nhint: Run pi-sandbox destroy nope --force;/);
  });

  test("on a terminal it asks for the name: the name confirms, anything else refuses before sending", async () => {
    const asked: string[] = [];
    const ask = (answer: string) => (question: string) => (asked.push(question), Promise.resolve(answer));
    const action = { action: "destroy", name: "demo", confirm: "" };
    expect(await confirmDestroy(action, ask("demo\n"))).toEqual({ ...action, confirm: "demo" });
    expect(asked).toEqual(["Destroy instance demo, its disk and logs, for good? Type its name to confirm: "]);
    await expect(confirmDestroy(action, ask("y"))).rejects.toMatchObject({ code: "CONTROLLER_CONFIRM_MISMATCH" });
    expect(await confirmDestroy(action)).toBe(action);
    expect(await confirmDestroy({ ...action, confirm: "demo" }, ask("x"))).toEqual({ ...action, confirm: "demo" });
  });
});

describe("flags people expect from docker", () => {
  const view = {
    name: "demo",
    kind: "instances",
    state: "running",
    resources: { cpus: 2, memoryGiB: 4 },
    previews: [],
  } as unknown as EntryView;

  test("list -q prints names only and --format a line per entry from a template, or JSON lines", async () => {
    const print = async (...argv: string[]) => {
      const parsed = await actionFromArgv(["ls", ...argv]);
      if (parsed.kind !== "action" || !parsed.print) throw new Error("no printer");
      return parsed.print({ instances: [view, { ...view, name: "other", state: "stopped" }] });
    };
    expect(await print("-q")).toBe("demo\nother\n");
    expect(await print("--format", "{{.Name}} {{.State}} {{.Resources.Cpus}} {{.nope}}")).toBe(
      "demo running 2 \nother stopped 2 \n",
    );
    expect(JSON.parse((await print("--format", "json")).split("\n")[0]!)).toEqual(view);
    await expect(actionFromArgv(["ls", "--format", "{{Name}}"])).rejects.toThrow(/not a field such as/);
    expect(cli("ls", "-q").stdout).toBe("");
  });

  test("exec --env-file reads docker's KEY=VALUE lines and # comments, -e wins; -u runs the command via runuser", async () => {
    const file = join(dir(), "env");
    await writeFile(file, "# a comment\nA=1\n\nB=two words\nC=x\n");
    expect(await actionFromArgv(["exec", "demo", "--env-file", file, "-e", "C=y", "--", "env"])).toMatchObject({
      action: { env: { A: "1", B: "two words", C: "y" } },
    });
    expect(parseEnvFile("HOSTONLY\nMISSING\n", { HOSTONLY: "h" })).toEqual({ HOSTONLY: "h" });
    expect(() => parseEnvFile("=x\n")).toThrow(/without a name/);
    // In-process: node itself stops at a missing --env-file anywhere on its command line (exit 9).
    await expect(actionFromArgv(["exec", "demo", "--env-file", join(dir(), "absent"), "--", "true"])).rejects.toThrow(
      /--env-file: cannot read/,
    );
    expect(await actionFromArgv(["exec", "demo", "-u", "dev", "--", "id", "-un"])).toMatchObject({
      action: { cmd: "runuser -u dev -- sh -c 'id -un'" },
    });
  });
});
