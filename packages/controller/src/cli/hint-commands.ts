// Hints name actions as JSON (`Start it with {"action":"start","name":"demo"}.`), which is what the
// Pi tool and `call` take. On the CLI they read as commands (`pi-sandbox start demo`): each JSON
// action in a hint or a formatted result is turned into the command line whose `cli` mapping builds
// exactly that action. The command line is checked by parsing it back; an action no command line
// builds keeps its JSON, as `pi-sandbox call '…'`.

import { isDeepStrictEqual } from "node:util";
import type { ActionSpec, CliInput, CliMapping } from "../actions/kit/define.js";
import { findAction } from "../actions/kit/registry.js";

/** A word as the shell reads it: bare when safe, else in single quotes. */
export function shellWord(word: string): string {
  return /^[\w@%+=:,./…-]+$/u.test(word) ? word : `'${word.replace(/'/g, "'\\''")}'`;
}

function dropUndefined(action: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(action).filter(([, v]) => v !== undefined));
}

/** What `cli.toAction` builds from `argv` (positionals and `--long [value]` options), or undefined. */
function build(cli: CliMapping, argv: string[]): Record<string, unknown> | undefined {
  const positionals: string[] = [];
  const values: CliInput["values"] = {};
  for (let i = 0; i < argv.length; i++) {
    const word = argv[i]!;
    const option = word.startsWith("--") ? cli.options?.[word.slice(2)] : undefined;
    if (!option) positionals.push(word);
    else if (option.type === "boolean") values[word.slice(2)] = true;
    else values[word.slice(2)] = option.multiple ? [argv[++i]!] : argv[++i];
  }
  try {
    const built = cli.toAction({ positionals, values, stdin: () => Promise.resolve("") });
    return built instanceof Promise ? undefined : dropUndefined(built);
  } catch {
    return undefined;
  }
}

/**
 * The `pi-sandbox …` command line that runs `action`, or undefined when no subcommand builds it.
 * `name` is the first positional; every other argument becomes the option or positional that
 * yields it, tried one at a time.
 */
export function commandLineOf(action: Record<string, unknown>): string | undefined {
  const spec = findAction(String(action.action)) as ActionSpec | undefined;
  const cli = spec?.cli;
  if (!spec || !cli) return undefined;
  const argv: string[] = typeof action.name === "string" ? [action.name] : [];
  const rest = Object.entries(action).filter(([key]) => key !== "action" && key !== "name");
  for (let progress = true; rest.length > 0 && progress;) {
    progress = false;
    for (const [i, [key, value]] of rest.entries()) {
      const candidates: string[][] = [];
      for (const [long, option] of Object.entries(cli.options ?? {})) {
        candidates.push(option.type === "boolean" ? [`--${long}`] : [`--${long}`, String(value)]);
      }
      if (typeof value === "string" || typeof value === "number") candidates.push([String(value)]);
      const found = candidates.find((words) => isDeepStrictEqual(build(cli, [...argv, ...words])?.[key], value));
      if (found) {
        argv.push(...found);
        rest.splice(i, 1);
        progress = true;
        break;
      }
    }
  }
  if (!isDeepStrictEqual(build(cli, argv), dropUndefined(action))) return undefined;
  return ["pi-sandbox", spec.name, ...argv.map(shellWord)].join(" ");
}

/**
 * `text` with every `{"action":…}` JSON object in it written as its command line; objects that
 * are not JSON (help's `{"action":"exec", name: string, …}` shapes) stay as they are.
 */
export function hintsAsCommands(text: string): string {
  return text.replace(/\{"action":[^{}]*\}/g, (json) => {
    let action: unknown;
    try {
      action = JSON.parse(json);
    } catch {
      return json;
    }
    if (typeof action !== "object" || action === null) return json;
    return commandLineOf(action as Record<string, unknown>) ?? `pi-sandbox call ${shellWord(json)}`;
  });
}
