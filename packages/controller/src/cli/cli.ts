// `pi-sandbox`: the same actions as the Pi tool, for people and scripts. Each action module says
// how its subcommand maps onto the action (actions/*.ts, `cli`); this file only parses and prints.

import { parseArgs, type ParseArgsOptionsConfig } from "node:util";
import { escapeControlChars } from "@pi-sandbox/config";
import { UsageError, type ActionSpec } from "../actions/define.js";
import { ACTIONS, findAction, findCliAction } from "../actions/registry.js";
import { callAction, isControllerError, renderHelp, type ProgressEvent } from "../client/index.js";

function usage(): string {
  const lines = ["usage: pi-sandbox <command> [arguments] [--json]", ""];
  lines.push("  call '<action JSON>'                 run any action; prints its JSON result");
  for (const spec of ACTIONS as readonly ActionSpec[]) if (spec.cli?.usage) lines.push(`  ${spec.cli.usage}`);
  lines.push("");
  lines.push('Errors exit 1 and print "error CODE: message" and a hint on stderr');
  lines.push('({"error":{code,message,hint}} with --json, and always for call).');
  return lines.join("\n");
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

const COMMON: ParseArgsOptionsConfig = { json: { type: "boolean" }, help: { type: "boolean", short: "h" } };

/** Builds the action object for a subcommand. */
export async function actionFromArgv(argv: string[]): Promise<{ action: Record<string, unknown>; json: boolean }> {
  const command = argv.find((a) => !a.startsWith("-"));
  if (command === "call") {
    const { values, positionals } = parseArgs({ args: argv, allowPositionals: true, options: COMMON });
    const input = positionals[1];
    if (input === undefined) throw new UsageError("call needs an action JSON");
    if (values.help) return { action: { action: "help" }, json: true };
    return { action: { json: input }, json: true };
  }
  const spec = command === undefined ? undefined : findCliAction(command);
  if (command !== undefined && command !== "help" && !spec) throw new UsageError(`unknown command ${command}`);
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { ...COMMON, ...(spec?.cli?.options ?? {}) },
  });
  const json = values.json === true;
  if (!spec || values.help || spec.name === "help") return { action: { action: "help" }, json };
  const action = await spec.cli!.toAction({ positionals: positionals.slice(1), values, stdin: readStdin });
  return { action, json };
}

function dropUndefined(action: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(action).filter(([, v]) => v !== undefined));
}

/** Human-readable rendering of an action's result: the module's formatter, else indented JSON. */
export function formatResult(action: string, result: unknown): string {
  const spec = findAction(action);
  try {
    if (spec?.formatText) return spec.formatText(result as never);
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

/** Runs the CLI with `argv` (without node and script); resolves with the exit code. */
export async function runCli(argv: string[]): Promise<number> {
  let parsed: { action: Record<string, unknown>; json: boolean };
  try {
    parsed = await actionFromArgv(argv);
  } catch (error) {
    print(process.stderr, `${(error as Error).message}\n\n${usage()}\n`);
    return 2;
  }
  const { json } = parsed;
  // `call` passes its JSON text through: bad JSON is the action API's own coded error.
  const input = "json" in parsed.action ? (parsed.action.json as string) : dropUndefined(parsed.action);
  const actionName = typeof input === "string" ? "call" : String(input.action);
  if (actionName === "help" && !json) {
    print(process.stdout, `${usage()}\n\n${renderHelp({ includeUserOnly: true })}\n`);
    return 0;
  }
  const onProgress = (event: ProgressEvent) => {
    // One event is one line, whatever the guest put in it.
    if (!json) print(process.stderr, `[${escapeControlChars(event.stage)}] ${escapeControlChars(event.message)}\n`);
  };
  try {
    const result = await callAction(input, { onProgress, caller: "user" });
    print(process.stdout, json ? `${JSON.stringify(result, null, 2)}\n` : formatResult(actionName, result));
    // doctor reports problems as data; the exit code still tells scripts whether all is well.
    if (actionName === "doctor" && (result as { ok?: boolean }).ok === false) return 1;
    return 0;
  } catch (error) {
    const body = isControllerError(error)
      ? error.toJSON()
      : { code: "CONTROLLER_INTERNAL", message: (error as Error).message ?? String(error) };
    if (json) print(process.stderr, `${JSON.stringify({ error: body })}\n`);
    else
      print(
        process.stderr,
        `error ${escapeControlChars(body.code)}: ${body.message}${"hint" in body && body.hint ? `\nhint: ${body.hint}` : ""}\n`,
      );
    return 1;
  }
}
