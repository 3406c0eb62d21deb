// Which command a command line names: two-word commands (`image build`, `checkpoint rm`), an
// unknown word with the closest known ones, and the command's flags parsed with usage errors.
import { parseArgs, type ParseArgsOptionsConfig } from "node:util";
import { UsageError } from "../actions/kit/define.js";
import { ACTIONS, COMMAND_GROUPS, findCliAction } from "../actions/kit/registry.js";
import { EXTRA_COMMANDS, cliActions } from "./help-text.js";
import { didYouMean } from "./suggest.js";

/**
 * `image build …` as `image-build …`: a two-word command (COMMAND_GROUPS) becomes its action's
 * name, as the command word or after `help`. A group word alone is a usage error naming its
 * subcommands, unless it is a command of its own.
 */
export function joinCommandGroups(argv: string[]): string[] {
  let at = argv.findIndex((a) => !a.startsWith("-"));
  if (argv[at] === "help") at = argv.findIndex((a, i) => i > at && !a.startsWith("-"));
  const group = argv[at];
  if (at < 0 || group === undefined || !COMMAND_GROUPS.includes(group)) return argv;
  const sub = argv[at + 1];
  if (sub !== undefined && findCliAction(`${group}-${sub}`)) {
    return [...argv.slice(0, at), `${group}-${sub}`, ...argv.slice(at + 2)];
  }
  // A group word that is a command itself (`checkpoint <name>` beside `checkpoint rm`).
  if (findCliAction(group)) return argv;
  const subs = ACTIONS.filter((spec) => spec.name.startsWith(`${group}-`)).map((spec) =>
    spec.name.slice(group.length + 1),
  );
  const typed = sub !== undefined && !sub.startsWith("-") ? ` (not ${sub}${didYouMean(sub, subs)})` : "";
  throw new UsageError(`${group} needs a subcommand: ${subs.join(", ")}${typed}`);
}

/** Every command word: action subcommands and their aliases, `call`, `completion`, group words. */
function commandWords(): string[] {
  return [
    ...cliActions().flatMap((spec) =>
      COMMAND_GROUPS.some((g) => spec.name.startsWith(`${g}-`)) ? [] : [spec.name, ...(spec.cli.aliases ?? [])],
    ),
    ...EXTRA_COMMANDS.map((extra) => extra.name),
    ...COMMAND_GROUPS,
  ];
}

/** `unknown command frobnicate; did you mean …?` */
export function unknownCommand(command: string): UsageError {
  return new UsageError(`unknown command ${command}${didYouMean(command, commandWords())}`);
}

/** parseArgs for one command; an unknown flag is a usage error naming the closest known ones. */
export function parseCommand(command: string | undefined, argv: string[], options: ParseArgsOptionsConfig) {
  try {
    return parseArgs({ args: argv, allowPositionals: command !== undefined, options });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const flag = /'([^']+)'/.exec((error as Error).message)?.[1];
    if (code !== "ERR_PARSE_ARGS_UNKNOWN_OPTION" || flag === undefined) throw error;
    const known = Object.entries(options).flatMap(([long, o]) => [`--${long}`, ...(o.short ? [`-${o.short}`] : [])]);
    // A one-letter flag is too short to guess from; its command's flags are listed by --help.
    const hint = flag.startsWith("--") ? didYouMean(flag, known) : "";
    throw new UsageError(`${command ?? "pi-sandbox"} has no option ${flag}${hint}`);
  }
}
