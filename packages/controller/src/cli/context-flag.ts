// `--context NAME` (or `--context=NAME`), taken by every command before its own flags are parsed,
// and `pi-sandbox system dial-stdio`, which ssh runs on the other machine of a context.

import { UsageError } from "../actions/kit/define.js";
import { callAction } from "../client/index.js";
import { serveStdio } from "../remote/dial-stdio.js";
import { runOverSsh } from "../remote/ssh.js";
import { selectContext } from "../state/contexts.js";

/** `argv` without `--context`, and its value; words after `--` are the command's own. */
export function takeContextFlag(argv: readonly string[]): { argv: string[]; context?: string } {
  const rest: string[] = [];
  let context: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const word = argv[i]!;
    if (word === "--") {
      rest.push(...argv.slice(i));
      break;
    }
    if (word === "--context" || word.startsWith("--context=")) {
      const value = word === "--context" ? argv[++i] : word.slice("--context=".length);
      if (value === undefined || value === "" || value.startsWith("-"))
        throw new UsageError("--context needs a context name");
      context = value;
      continue;
    }
    rest.push(word);
  }
  return { argv: rest, ...(context !== undefined ? { context } : {}) };
}

/** `system dial-stdio`: serves the laptop on stdin/stdout until it hangs up; the exit code. */
export async function runSystem(positionals: readonly string[]): Promise<number> {
  if (positionals[0] !== "dial-stdio" || positionals.length > 1) {
    throw new UsageError(
      `system knows dial-stdio (ssh runs it for a context), not ${positionals.join(" ") || "nothing"}`,
    );
  }
  await serveStdio(process.stdin, process.stdout, (action, options) =>
    // The laptop checked the call and asked the user what needed asking: it runs as theirs here,
    // recorded as the laptop's caller's (`options.relayed`), a model's still kept from user-only actions.
    callAction(action, { ...options, caller: "user", context: "local" }),
  );
  return 0;
}

/**
 * exec -i/-it and shell through another context: the whole command line runs there, over the
 * context's ssh with this terminal (`tty`), as local to that machine. Undefined for local.
 */
export async function runSessionThroughContext(
  argv: readonly string[],
  tty: boolean,
  context: string | undefined,
): Promise<number | undefined> {
  const target = await selectContext(context, process.env);
  if (!target) return undefined;
  return runOverSsh(target, process.env, ["--context=local", ...argv], tty);
}
