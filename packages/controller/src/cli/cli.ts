// `pi-sandbox`: the same actions as the Pi tool, for people and scripts. Each action module says
// how its subcommand maps onto the action (actions/*.ts, `cli`); this file only parses and prints.
// exec follows its command (cli/exec-follow.ts), logs -f its log (cli/logs-follow.ts), and shell
// opens a session (cli/shell-session.ts).

import type { ParseArgsOptionsConfig } from "node:util";
import { escapeControlChars, isCodedError } from "@pi-sandbox/config";
import { UsageError, type ActionSpec, type CliInput, type CliMapping, type CliRun } from "../actions/kit/define.js";
import { findAction, findCliAction } from "../actions/kit/registry.js";
import { joinCommandGroups, parseCommand, unknownCommand } from "./command-words.js";
import { callAction, renderHelp, type ProgressEvent } from "../client/index.js";
import { ControllerError } from "../errors.js";
import { COMPLETION_SHELLS, completionScript } from "./completion.js";
import { askOnTerminal, confirmDestroy } from "./confirm.js";
import { followExec } from "./exec-follow.js";
import { hintsAsCommands } from "./hint-commands.js";
import { EXEC_CLI_FAILED, execInteractive, type InteractiveExec } from "./exec-interactive.js";
import { commandHelp, completionHelp, overview, positionalLimit, synopsis, version } from "./help-text.js";
import { didYouMean } from "./suggest.js";
import { followLogs, receivedStamper } from "./logs-follow.js";
import { progressPrinter } from "./progress-bar.js";
import { runSshSession } from "./shell-session.js";
import { runSessionThroughContext, runSystem, takeContextFlag } from "./context-flag.js";

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

const COMMON: ParseArgsOptionsConfig = { json: { type: "boolean" }, help: { type: "boolean", short: "h" } };

/** What a command line asks for. */
export type ParsedCommand =
  /** Call an action (`{json: text}` for `call`) and print its result, or run it as `run` says. */
  | {
      kind: "action";
      action: Record<string, unknown>;
      json: boolean;
      run?: CliRun;
      /** Prints the result instead of the action's formatter (`list -q`). */
      print?: (result: unknown) => string;
    }
  /** Call the action once per name (`stop a b`), reporting each. */
  | { kind: "each"; actions: Record<string, unknown>[]; json: boolean }
  /**
   * The overview (neither `spec` nor `topic`), one command's help, every action's reference
   * (`help actions`) or completion's help.
   */
  | { kind: "help"; json: boolean; spec?: ActionSpec & { cli: CliMapping }; topic?: "actions" | "completion" }
  | { kind: "version" }
  /** `system dial-stdio`: the far end of a context. */
  | { kind: "system"; positionals: string[] }
  | { kind: "completion"; shell: (typeof COMPLETION_SHELLS)[number] };

/** Parses a command line (without node and script); throws `UsageError` (or parseArgs' TypeError). */
export async function actionFromArgv(rawArgv: string[]): Promise<ParsedCommand> {
  const argv = joinCommandGroups(rawArgv);
  const command = argv.find((a) => !a.startsWith("-"));
  if (command === undefined) {
    const { values } = parseCommand(undefined, argv, { ...COMMON, version: { type: "boolean" } });
    if (values.version) return { kind: "version" };
    return values.json ? { kind: "action", action: { action: "help" }, json: true } : { kind: "help", json: false };
  }
  if (command === "call") {
    const { values, positionals } = parseCommand(command, argv, COMMON);
    const input = positionals[1];
    if (values.help) return { kind: "action", action: { action: "help" }, json: true };
    if (input === undefined) throw new UsageError("call needs an action JSON");
    return { kind: "action", action: { json: input }, json: true };
  }
  if (command === "system") {
    const { positionals } = parseCommand(command, argv, COMMON);
    return { kind: "system", positionals: positionals.slice(1) };
  }
  if (command === "completion") {
    const { values, positionals } = parseCommand(command, argv, COMMON);
    const shell = positionals[1];
    const shells = `${COMPLETION_SHELLS.slice(0, -1).join(", ")} and ${COMPLETION_SHELLS.at(-1)}`;
    if (values.help) return { kind: "help", json: false, topic: "completion" };
    if (shell === undefined) throw new UsageError(`completion needs a shell: ${shells}`);
    if (!(COMPLETION_SHELLS as readonly string[]).includes(shell))
      throw new UsageError(`completion knows ${shells}, not ${shell}${didYouMean(shell, COMPLETION_SHELLS)}`);
    return { kind: "completion", shell: shell as (typeof COMPLETION_SHELLS)[number] };
  }
  const spec = findCliAction(command) as (ActionSpec & { cli: CliMapping }) | undefined;
  if (!spec) throw unknownCommand(command);
  const { values, positionals } = parseCommand(command, argv, { ...COMMON, ...parseOptions(spec.cli) });
  const json = values.json === true;
  if (spec.name === "help") {
    const topic = positionals[1];
    if (topic === "actions")
      return json ? { kind: "action", action: { action: "help" }, json } : { kind: "help", json, topic };
    if (topic === "completion") return { kind: "help", json, topic };
    const about = topic === undefined ? undefined : findCliAction(topic);
    if (topic !== undefined && !about) throw unknownCommand(topic);
    if (about) return { kind: "help", json, spec: about as ActionSpec & { cli: CliMapping } };
    // `help --json` is the help action's JSON, as before.
    return json ? { kind: "action", action: { action: "help" }, json } : { kind: "help", json };
  }
  if (values.help) return { kind: "help", json, spec };
  // Only string options are declared `multiple`, so lists hold strings.
  const input: CliInput = { positionals: positionals.slice(1), values: values as CliInput["values"], stdin: readStdin };
  if (spec.cli.eachName && input.positionals.length > 1) {
    const actions: Record<string, unknown>[] = [];
    for (const name of input.positionals) actions.push(await spec.cli.toAction({ ...input, positionals: [name] }));
    return { kind: "each", actions, json };
  }
  const limit = spec.cli.eachName ? 1 : positionalLimit(spec);
  if (limit !== undefined && input.positionals.length > limit) {
    const extra = input.positionals.slice(limit).join(" ");
    throw new UsageError(`${command} takes ${limit === 0 ? "no arguments" : `at most ${limit}`}; unexpected: ${extra}`);
  }
  const action = await spec.cli.toAction(input);
  const print = spec.cli.print?.(input) as ((result: unknown) => string) | undefined;
  return { kind: "action", action, json, run: spec.cli.run?.(input), ...(print ? { print } : {}) };
}

/** A command's options as parseArgs takes them (without their help texts). */
function parseOptions(cli: CliMapping): ParseArgsOptionsConfig {
  return Object.fromEntries(
    Object.entries(cli.options ?? {}).map(([long, { type, short, multiple }]) => [
      long,
      { type, ...(short ? { short } : {}), ...(multiple ? { multiple } : {}) },
    ]),
  );
}

function dropUndefined(action: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(action).filter(([, v]) => v !== undefined));
}

/** Human-readable rendering of an action's result: the module's formatter, else indented JSON. */
export function formatResult(action: string, result: unknown, input?: Record<string, unknown>): string {
  const spec = findAction(action);
  try {
    if (spec?.formatText) return hintsAsCommands(spec.formatText(result, input));
  } catch {
    // an unexpected shape: fall back to JSON
  }
  return JSON.stringify(result, null, 2) + "\n";
}

/**
 * Writes CLI output. Results, progress and errors carry guest text (titles, agent messages, command
 * output), and a terminal obeys the escape sequences in it (OSC 52 sets the clipboard), so every
 * control character is escaped visibly except line breaks and tabs; colour codes of build tools
 * show as `\x1b[31m` too. Formatters have already escaped one-line fields, line breaks included.
 * Escaped JSON is still JSON of the same value: JSON.stringify escapes C0 itself, and DEL and C1
 * become `\u007f`…`\u009f`.
 */
function print(stream: NodeJS.WriteStream, text: string): void {
  stream.write(escapeControlChars(text, { multiline: true }));
}

const out = (text: string) => print(process.stdout, text);
const err = (text: string) => print(process.stderr, text);

/** A usage error: the message, then the command's usage if one was named, else the overview. */
function usageError(argv: string[], error: Error): number {
  const command = argv.find((a) => !a.startsWith("-"));
  const spec = command === undefined ? undefined : findCliAction(command);
  const usage = spec?.cli
    ? `usage: pi-sandbox ${synopsis(spec.cli) || spec.name}\n(pi-sandbox ${command} --help for more)`
    : overview();
  err(`${error.message}\n\n${usage}\n`);
  return spec?.name === "exec" ? EXEC_CLI_FAILED : 2;
}

function printError(error: unknown, json: boolean): void {
  const body = isCodedError(error)
    ? error.toJSON()
    : new ControllerError("CONTROLLER_INTERNAL", (error as Error).message ?? String(error)).toJSON();
  if (json) err(`${JSON.stringify({ error: body })}\n`);
  else {
    // Hints name actions as JSON for the Pi tool; here they name commands.
    const hint = body.hint ? `\nhint: ${hintsAsCommands(body.hint)}` : "";
    err(`error ${escapeControlChars(body.code)}: ${hintsAsCommands(body.message)}${hint}\n`);
  }
}

/** What to say when Ctrl-C ends the wait for a long action, whose work the daemon goes on with. */
function interruptedNotice(action: Record<string, unknown>, started: boolean): string {
  const name = String(action.name);
  const template = action.action === "prepare" || action.kind === "templates";
  const follow = template
    ? `pi-sandbox inspect ${name} --template`
    : `pi-sandbox inspect ${name} (state) and pi-sandbox logs ${name} (controller log)`;
  // Before the first progress event the call may not have reached the daemon yet.
  const goesOn = started ? "but" : "and if its controller had received it,";
  return `\n[interrupted: pi-sandbox stopped waiting, ${goesOn} ${String(action.action)} of ${name} goes on in its controller; follow it with ${follow}]\n`;
}

/**
 * One action call with the CLI's progress printing. A long action (create, start, prepare, stop,
 * destroy) is left to the daemon on Ctrl-C: resolves `interrupted` after saying how to follow it.
 */
async function callOnce(
  input: string | Record<string, unknown>,
  json: boolean,
): Promise<{ result: unknown } | { interrupted: true }> {
  const long = typeof input !== "string" && findAction(String(input.action))?.long === true;
  const abort = new AbortController();
  const onInterrupt = () => abort.abort(new Error("interrupted"));
  if (long) process.once("SIGINT", onInterrupt);
  const progress = progressPrinter(json, err, process.stderr);
  let started = false;
  const onProgress = (event: ProgressEvent) => {
    started = true;
    progress.print(event);
  };
  try {
    return {
      result: await callAction(input, { onProgress, caller: "user", via: "cli", signal: abort.signal, context }),
    };
  } catch (error) {
    progress.end();
    if (abort.signal.aborted && typeof input !== "string") {
      err(interruptedNotice(input, started));
      return { interrupted: true };
    }
    throw error;
  } finally {
    progress.end();
    process.off("SIGINT", onInterrupt);
  }
}

/** Questions go to the user only on a terminal (stdin and stderr) and without --json. */
function terminalAsk(json: boolean): typeof askOnTerminal | undefined {
  return !json && process.stdin.isTTY && process.stderr.isTTY ? askOnTerminal : undefined;
}

/** `stop a b`: one call per name, each result or error printed; 1 if any failed. */
async function runEach(actions: Record<string, unknown>[], json: boolean): Promise<number> {
  let failed = false;
  for (const action of actions) {
    try {
      const called = await callOnce(await confirmDestroy(dropUndefined(action), terminalAsk(json)), json);
      if ("interrupted" in called) return 130;
      out(json ? `${JSON.stringify(called.result)}\n` : formatResult(String(action.action), called.result, action));
    } catch (error) {
      failed = true;
      printError(error, json);
    }
  }
  return failed ? 1 : 0;
}

/** The `--context` of the command line being run (undefined: PI_SANDBOX_CONTEXT or the one in use). */
let context: string | undefined;

/** Runs the CLI with `argv` (without node and script); resolves with the exit code. */
export async function runCli(rawArgv: string[]): Promise<number> {
  let parsed: ParsedCommand;
  let argv = rawArgv;
  try {
    ({ argv, context } = takeContextFlag(rawArgv));
    parsed = await actionFromArgv(argv);
  } catch (error) {
    let joined = argv;
    try {
      joined = joinCommandGroups(argv);
    } catch {
      // the group word alone: the error already names its subcommands
    }
    return usageError(joined, error as Error);
  }
  switch (parsed.kind) {
    case "version":
      out(`pi-sandbox ${version()}\n`);
      return 0;
    case "completion":
      out(completionScript(parsed.shell));
      return 0;
    case "system":
      try {
        return await runSystem(parsed.positionals);
      } catch (error) {
        return usageError(argv, error as Error);
      }
    case "help":
      out(
        `${
          parsed.spec
            ? commandHelp(parsed.spec)
            : parsed.topic === "actions"
              ? renderHelp({ includeUserOnly: true })
              : parsed.topic === "completion"
                ? completionHelp()
                : overview()
        }\n`,
      );
      return 0;
  }
  if (parsed.kind === "each") return runEach(parsed.actions, parsed.json);
  const { json, run } = parsed;
  // `call` passes its JSON text through: bad JSON is the action API's own coded error.
  const input = "json" in parsed.action ? (parsed.action.json as string) : dropUndefined(parsed.action);
  const actionName = typeof input === "string" ? "call" : String(input.action);
  try {
    // exec -i/-it and a shell on a terminal: through another context, the session runs there.
    const session =
      run?.kind === "interactive"
        ? run.tty
        : run?.kind === "session" && !json && process.stdout.isTTY
          ? true
          : undefined;
    if (session !== undefined) {
      const code = await runSessionThroughContext(argv, session, context);
      if (code !== undefined) return code;
    }
    if (run?.kind === "follow" && typeof input !== "string") {
      return await followExec(
        input as Record<string, unknown> & { name: string },
        { json, timeoutMs: run.timeoutMs },
        {
          call: (action, signal) => callAction(action, { caller: "user", via: "cli", signal, context }),
          out,
          err,
          interrupts: process,
        },
      );
    }
    if (run?.kind === "interactive" && typeof input !== "string") {
      return await execInteractive(input as unknown as InteractiveExec, run.tty, {
        call: (action) => callAction(action, { caller: "user", via: "cli", context }),
        out,
        err,
        stdinIsTTY: process.stdin.isTTY === true,
      });
    }
    if (run?.kind === "follow-logs" && typeof input !== "string") {
      // --timestamps: every read after the tail carries the time it was received.
      const stamp = run.stampReceived ? receivedStamper() : undefined;
      let reads = 0;
      return await followLogs(input, {
        call: (action, signal) => callAction(action, { caller: "user", via: "cli", signal, context }),
        // With --json, one compact JSON object per read (JSON lines).
        print: (result) => {
          const received = stamp && reads++ > 0 ? new Date() : undefined;
          if (json)
            out(
              `${JSON.stringify(received ? { ...(result as object), receivedAt: received.toISOString() } : result)}\n`,
            );
          else out(stamp ? stamp(formatResult("logs", result), received) : formatResult("logs", result));
        },
        err,
        interrupts: process,
      });
    }
    const called = await callOnce(
      typeof input === "string" ? input : await confirmDestroy(input, terminalAsk(json)),
      json,
    );
    if ("interrupted" in called) return 130;
    const { result } = called;
    if (run?.kind === "session" && !json && process.stdout.isTTY) {
      return await runSshSession((result as { command: string }).command, err);
    }
    out(
      json
        ? `${JSON.stringify(result, null, 2)}\n`
        : parsed.print
          ? parsed.print(result)
          : formatResult(actionName, result, typeof input === "string" ? undefined : input),
    );
    // doctor reports problems as data; the exit code still tells scripts whether all is well.
    if (actionName === "doctor" && (result as { ok?: boolean }).ok === false) return 1;
    return 0;
  } catch (error) {
    printError(error, json);
    // exec's own code is the command's, so its failures take docker's 125.
    return actionName === "exec" ? EXEC_CLI_FAILED : 1;
  }
}
