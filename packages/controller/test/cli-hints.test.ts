// Hints speak the caller's language: every action a controller hint names reads as the
// `pi-sandbox` command that builds that very action on the command line, and stays JSON with --json.
import { spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { readdirSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";
import { actionFromArgv } from "../src/cli/cli.js";
import { commandLineOf, hintsAsCommands } from "../src/cli/hint-commands.js";
import { splitShellWords } from "../src/actions/kit/shell-words.js";

/** Files that write action JSON as documentation of the JSON API, for call and the Pi tool. */
const NOT_HINTS = new Set(["define.ts", "validate.ts", "help-text.ts", "hint-commands.ts"]);
const SRC = fileURLToPath(new URL("../src/", import.meta.url));

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? sources(join(dir, entry.name)) : entry.name.endsWith(".ts") ? [join(dir, entry.name)] : [],
  );
}

/** Every `{"action":…}` object written in the controller's source, `${…}` placeholders filled with `demo`. */
function actionsInSource(): { file: string; json: string }[] {
  return sources(SRC).flatMap((file) =>
    [...readFileSync(file, "utf8").matchAll(/\{"action":[^{}]*(?:\$\{[^}]*\}[^{}]*)*\}/g)]
      .map((m) => m[0].replace(/\$\{[^}]*\}/g, "demo"))
      // help's shapes (`{"action":"exec", name: string}`) and call's "one JSON object such as" are no hints
      .filter(() => !NOT_HINTS.has(basename(file)))
      .map((json) => ({ file: file.slice(SRC.length), json })),
  );
}

test("every action named in a controller hint reads as a pi-sandbox command that builds that very action", async () => {
  const found = actionsInSource();
  expect(found.length).toBeGreaterThanOrEqual(15);
  for (const { file, json } of found) {
    const action = JSON.parse(json) as Record<string, unknown>;
    const line = commandLineOf(action);
    expect({ file, json, line }).toEqual({ file, json, line: expect.stringMatching(/^pi-sandbox /) });
    const words = splitShellWords(line!.replace(/^pi-sandbox /, "")) ?? [];
    const parsed = await actionFromArgv(words);
    expect(parsed).toMatchObject({ kind: "action", action: expect.objectContaining(action) });
  }
});

test("a hint reads as commands: start, list --templates, destroy --confirm, logs of a service", () => {
  expect(hintsAsCommands('Start it with {"action":"start","name":"demo"}.')).toBe(
    "Start it with pi-sandbox start demo.",
  );
  expect(hintsAsCommands('List templates with {"action":"list","kind":"templates"}.')).toBe(
    "List templates with pi-sandbox list --templates.",
  );
  expect(hintsAsCommands('Send {"action":"destroy","name":"t","confirm":"t","kind":"templates"}; gone.')).toBe(
    "Send pi-sandbox destroy t --force --template; gone.",
  );
  expect(hintsAsCommands('See {"action":"logs","name":"demo","service":"web"}.')).toBe("See pi-sandbox logs demo web.");
  expect(hintsAsCommands('{"action":"services","name":"demo","op":"status"}')).toBe("pi-sandbox services demo status");
});

test("help's argument shapes are left alone, and an action no command builds stays JSON for call", () => {
  expect(hintsAsCommands('{"action":"exec", name: string}')).toBe('{"action":"exec", name: string}');
  expect(hintsAsCommands('Run {"action":"read","name":"demo","path":"a b","offset":3,"nope":1}.')).toBe(
    `Run pi-sandbox call '{"action":"read","name":"demo","path":"a b","offset":3,"nope":1}'.`,
  );
});

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));

test("on the command line a hint names a command; with --json it keeps the action's JSON for tools", async () => {
  const home = await mkdtemp(join(tmpdir(), "cli-hints-"));
  try {
    const run = (...args: string[]) =>
      spawnSync(process.execPath, [CLI, ...args], { encoding: "utf8", env: { ...process.env, PI_SANDBOX_HOME: home } });
    expect(run("inspect", "nope").stderr).toContain("hint: List instances with pi-sandbox list.");
    expect(JSON.parse(run("inspect", "nope", "--json").stderr)).toMatchObject({
      error: { hint: 'List instances with {"action":"list"}.' },
    });
  } finally {
    await rm(home, { recursive: true, force: true });
  }
});
