// The CLI's own texts: the command overview, one command's --help and --version, all generated
// from the action modules (their `cli` mappings and argument docs).

import { readFileSync } from "node:fs";
import type { ActionSpec, CliMapping, CliOption } from "../actions/kit/define.js";
import { ACTIONS, COMMAND_GROUPS, findAction } from "../actions/kit/registry.js";

/** Subcommands that are not actions: `call` and `completion`. */
export const EXTRA_COMMANDS = [
  { name: "call", usage: "call '<action JSON>'   run any action; prints its JSON result" },
  { name: "completion", usage: "completion bash|zsh|fish   print a shell completion script" },
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
  // `image build …` is two command words; `checkpoint <name>` is one, although `checkpoint` is a group too.
  const words = all.slice(COMMAND_GROUPS.includes(all[0]!) && spec.name !== all[0] ? 2 : 1);
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

/**
 * The overview's groups of commands (action names, `image` for its subcommands); the rest go last.
 * A list of names is one row: its words joined, its descriptions after each other.
 */
const OVERVIEW_GROUPS: readonly { title: string; commands: readonly (string | readonly string[])[] }[] = [
  {
    title: "Instances",
    commands: ["list", "inspect", "create", "start", "stop", "suspend", "destroy", "prepare", "dashboard", "audit"],
  },
  { title: "Branches", commands: ["fork", ["checkpoint", "checkpoints"], "rewind", ["diff", "apply"]] },
  {
    title: "Inside an instance",
    commands: [
      "exec",
      ["exec-status", "exec-kill"],
      "shell",
      ["read", "write"],
      "upload",
      "logs",
      "services",
      "preview",
      "secrets",
    ],
  },
  {
    title: "Setting up, and this CLI",
    commands: ["init", "doctor", ["image", "context"], "help", "call", "completion"],
  },
];

/** What a group word without a command of its own is about, in the overview. */
const GROUP_TEXT: Record<string, string> = {
  image: "guest images",
  context: "other machines (--context NAME)",
};

/** The description after a usage line's synopsis (two or more spaces start it). */
function usageDescription(usage: string): string {
  return usage.split(/ {2,}/).slice(1).join(" ").trim();
}

/** The overview's rows: command words (with aliases) and one line each, keyed by action name. */
function overviewRows(): Map<string, [string, string]> {
  const rows = new Map<string, [string, string]>();
  for (const extra of EXTRA_COMMANDS) rows.set(extra.name, [extra.name, usageDescription(extra.usage)]);
  const groupSubs = new Map<string, string[]>();
  for (const spec of cliActions()) {
    if (!spec.cli.usage) continue;
    const words = synopsis(spec.cli).split(" ");
    const group = COMMAND_GROUPS.find((g) => spec.name.startsWith(`${g}-`));
    if (group) {
      groupSubs.set(group, [...(groupSubs.get(group) ?? []), spec.name.slice(group.length + 1)]);
      continue;
    }
    const names = [words[0]!, ...(spec.cli.aliases ?? []).filter((alias) => alias !== words[0])];
    rows.set(spec.name, [names.join(", "), usageDescription(spec.cli.usage)]);
  }
  for (const [group, subs] of groupSubs) {
    const own = rows.get(group);
    // A group word that is a command itself (`checkpoint`) names its subcommands after its own line.
    if (own) rows.set(group, [own[0], `${own[1]} (${subs.map((sub) => `${group} ${sub}`).join(", ")})`]);
    else rows.set(group, [group, `${GROUP_TEXT[group] ?? group}: ${group} ${subs.join("|")}`]);
  }
  return rows;
}

/**
 * The overview printed by `pi-sandbox --help` (and `help`) and after a usage error: what the CLI
 * is, its commands in groups with one line each (related ones share a line), and where to read more.
 * At most 45 lines: one screen of a 50-line terminal with the command and the prompt.
 */
export function overview(): string {
  const rows = overviewRows();
  const groups = OVERVIEW_GROUPS.map((group) => {
    const printed: [string, string][] = [];
    for (const entry of group.commands) {
      const names = typeof entry === "string" ? [entry] : entry;
      const found = names.map((name) => rows.get(name)).filter((row) => row !== undefined);
      if (found.length > 0) printed.push([found.map(([w]) => w).join(", "), found.map(([, t]) => t).join("; ")]);
      for (const name of names) rows.delete(name);
    }
    return { title: group.title, printed };
  });
  // A command no group names is listed with the last group, never left out.
  groups.at(-1)!.printed.push(...rows.values());
  const width = Math.max(...groups.flatMap((g) => g.printed.map(([words]) => words.length))) + 3;
  const lines = [
    "pi-sandbox: named local dev environments in QEMU microVMs; each command is an action of the Pi tool.",
    "",
    "usage: pi-sandbox <command> [arguments] [--json]",
  ];
  for (const group of groups) {
    lines.push("", `${group.title}:`, ...group.printed.map(([words, text]) => `  ${words.padEnd(width)}${text}`));
  }
  lines.push(
    "",
    "pi-sandbox <command> --help: its flags; pi-sandbox help actions: every action, YAML keys, limits.",
    'Errors exit 1 (exec: 125) with "error CODE: message" and a hint on stderr; usage errors exit 2.',
  );
  return lines.join("\n");
}

/** The `--json` and `--help` every command takes. */
const COMMON_OPTIONS: Record<string, CliOption> = {
  json: { type: "boolean", description: "print the result, or the error, as JSON" },
  help: { type: "boolean", short: "h", description: "this help" },
};

/** `-w, --cwd <dir>   description` lines of a subcommand's options, `--json` and `--help` included. */
export function optionLines(cli: Pick<CliMapping, "options">): string[] {
  const all = Object.entries({ ...(cli.options ?? {}), ...COMMON_OPTIONS }).map(([long, option]) => [
    `${option.short ? `-${option.short}, ` : ""}--${long}${option.type === "string" ? ` <${option.value ?? "value"}>` : ""}${option.multiple ? " (repeatable)" : ""}`,
    option.description,
  ]);
  const width = Math.max(...all.map(([flag]) => flag!.length)) + 3;
  return all.map(([flag, text]) => `${flag!.padEnd(width)}${text}`);
}

function argumentLines(spec: ActionSpec): string[] {
  if (spec.args.length === 0) return [];
  const lines = ["", `arguments of the action (pi-sandbox call '{"action":"${spec.name}",…}'):`];
  for (const a of spec.args) lines.push(`  ${a.name}${a.required ? "" : " (optional)"}: ${a.text}`);
  return lines;
}

/** `pi-sandbox <command> --help`: usage, what it does, its options and the action's arguments. */
export function commandHelp(spec: ActionSpec & { cli: CliMapping }): string {
  const cli = spec.cli;
  const also = (cli.alsoBuilds ?? []).map((name) => findAction(name)).filter((s) => s !== undefined);
  const lines = [`usage: pi-sandbox ${synopsis(cli) || spec.name}`];
  const aliases = (cli.aliases ?? []).filter((alias) => alias !== synopsis(cli).split(" ")[0]);
  if (aliases.length) lines.push(`alias: ${aliases.join(", ")}`);
  lines.push("", spec.summary, ...also.map((other) => `or: ${other.summary}`));
  if (cli.notes?.length) lines.push("", ...cli.notes);
  lines.push("", "options:", ...optionLines(cli).map((option) => `  ${option}`));
  lines.push(...argumentLines(spec));
  for (const other of also) lines.push(...argumentLines(other));
  return lines.join("\n");
}

/** `pi-sandbox completion --help`. */
export function completionHelp(): string {
  return [
    "usage: pi-sandbox completion bash|zsh|fish",
    "",
    "Prints a completion script for the shell: commands, their flags, instance names (from",
    "pi-sandbox list), template names after create -t, and instance names before : in cp.",
    "  bash:  source <(pi-sandbox completion bash)         (e.g. in ~/.bashrc)",
    "  zsh:   source <(pi-sandbox completion zsh)          (after compinit), or save it as _pi-sandbox in $fpath",
    "  fish:  pi-sandbox completion fish | source          or save it as ~/.config/fish/completions/pi-sandbox.fish",
    "",
    "options:",
    ...optionLines({}).map((option) => `  ${option}`),
  ].join("\n");
}

/** The controller package's version. */
export function version(): string {
  // src/cli/ and dist/cli/ are both two levels below the package root.
  const manifest = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
    version: string;
  };
  return manifest.version;
}
