// The CLI's own texts: the command overview, one command's --help and --version, all generated
// from the action modules (their `cli` mappings and argument docs).

import { readFileSync } from "node:fs";
import type { ActionSpec, CliMapping } from "../actions/define.js";
import { ACTIONS, COMMAND_GROUPS } from "../actions/registry.js";

/** Subcommands that are not actions: `call` and `completion`. */
export const EXTRA_COMMANDS = [
  { name: "call", usage: "call '<action JSON>'                 run any action; prints its JSON result" },
  { name: "completion", usage: "completion bash|zsh                  print a shell completion script" },
] as const;

/** Every action with a subcommand, in help order. */
export function cliActions(): (ActionSpec & { cli: CliMapping })[] {
  return (ACTIONS as readonly ActionSpec[]).filter((spec): spec is ActionSpec & { cli: CliMapping } => !!spec.cli);
}

/** The usage line of a subcommand without its overview description (two or more spaces end it). */
export function synopsis(cli: CliMapping): string {
  return cli.usage.split(/ {2,}/)[0]!.trim();
}

/**
 * How many positionals a subcommand takes, read from its synopsis (`<x>`, `[x]` and `NAME` words
 * that are not an option's value); undefined when a word ends in `…` (any number).
 */
export function positionalLimit(spec: ActionSpec & { cli: CliMapping }): number | undefined {
  const all = synopsis(spec.cli).split(" ");
  const words = all.slice(COMMAND_GROUPS.includes(all[0]!) ? 2 : 1);
  let count = 0;
  for (let i = 0; i < words.length; i++) {
    const word = words[i]!;
    if (word.startsWith("-") && word !== "--") {
      if (/^<|^[A-Z]+$/.test(words[i + 1] ?? "")) i++;
    } else if (/^[<[][^-]|^[A-Z][A-Z_]*$/.test(word)) {
      if (word.includes("…")) return undefined;
      count++;
    }
  }
  return count;
}

/** The overview printed by `pi-sandbox help` and after a usage error. */
export function overview(): string {
  const lines = ["usage: pi-sandbox <command> [arguments] [--json]", ""];
  lines.push(`  ${EXTRA_COMMANDS[0].usage}`);
  for (const spec of cliActions()) if (spec.cli.usage) lines.push(`  ${spec.cli.usage}`);
  lines.push(`  ${EXTRA_COMMANDS[1].usage}`);
  lines.push("");
  lines.push("pi-sandbox <command> --help shows one command; pi-sandbox --version the version.");
  lines.push('Errors exit 1 and print "error CODE: message" and a hint on stderr');
  lines.push('({"error":{code,message,hint}} with --json, and always for call).');
  return lines.join("\n");
}

/** `-w, --cwd <value>` lines of a subcommand's options, `--json` and `--help` included. */
export function optionLines(cli: CliMapping): string[] {
  const lines = Object.entries(cli.options ?? {}).map(
    ([long, option]) =>
      `${option.short ? `-${option.short}, ` : ""}--${long}${option.type === "string" ? " <value>" : ""}${option.multiple ? " (repeatable)" : ""}`,
  );
  return [...lines, "--json", "-h, --help"];
}

/** `pi-sandbox <command> --help`: usage, what it does, its options and the action's arguments. */
export function commandHelp(spec: ActionSpec & { cli: CliMapping }): string {
  const cli = spec.cli;
  const lines = [`usage: pi-sandbox ${synopsis(cli) || spec.name}`];
  if (cli.aliases?.length) lines.push(`alias: ${cli.aliases.join(", ")}`);
  lines.push("", spec.summary);
  if (cli.notes?.length) lines.push("", ...cli.notes);
  lines.push("", "options:", ...optionLines(cli).map((option) => `  ${option}`));
  if (spec.args.length > 0) {
    lines.push("", `arguments of the action (pi-sandbox call '{"action":"${spec.name}",…}'):`);
    for (const a of spec.args) lines.push(`  ${a.name}${a.required ? "" : " (optional)"}: ${a.text}`);
  }
  return lines.join("\n");
}

/** The controller package's version. */
export function version(): string {
  // src/cli/ and dist/cli/ are both two levels below the package root.
  const manifest = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
    version: string;
  };
  return manifest.version;
}
