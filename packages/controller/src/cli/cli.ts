// `pi-sandbox`: the same actions as the Pi tool, for people and scripts.

import { parseArgs } from "node:util";
import { callAction, isControllerError, renderHelp, type ProgressEvent } from "../client/index.js";
import { formatResult } from "./format.js";

const USAGE = `usage: pi-sandbox <command> [arguments] [--json]

  call '<action JSON>'                 run any action; prints its JSON result
  list [--templates]                   instances (or templates) and their state
  inspect <name> [--template]          details, previews, errors, recovery hint
  create <name> (-c sandbox.yaml | -t template)
  prepare <template> -c sandbox.yaml   run setup and save a template
  start <name> | stop <name>
  destroy <name> --confirm <name> [--template]
  exec <name> [--cwd dir] [--timeout ms] -- <command…>
  exec-status <name> <handle> [--timeout ms] | exec-kill <name> <handle>
  read <name> <guest-path> | write <name> <guest-path> (content from stdin)
  logs <name> [service] [-n lines]
  services <name> <ensure|status|restart|stop> [service]
  preview <name> <guest-port> [--title t]
  ssh <name> [user]                    print a temporary ssh command
  doctor [-c sandbox.yaml]             check the host (and an image)
  help                                 actions, YAML keys, limits

Errors exit 1 and print "error CODE: message" and a hint on stderr
({"error":{code,message,hint}} with --json, and always for call).`;

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

function int(value: string | undefined, what: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n)) throw new UsageError(`${what} must be an integer; got ${value}`);
  return n;
}

class UsageError extends Error {}

/** Builds the action object for a subcommand. */
export async function actionFromArgv(argv: string[]): Promise<{ action: Record<string, unknown>; json: boolean }> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      json: { type: "boolean" },
      templates: { type: "boolean" },
      template: { type: "boolean" },
      config: { type: "string", short: "c" },
      from: { type: "string", short: "t" },
      confirm: { type: "string" },
      cwd: { type: "string" },
      timeout: { type: "string" },
      lines: { type: "string", short: "n" },
      title: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  const json = values.json ?? false;
  const [command, ...rest] = positionals;
  const need = (i: number, what: string): string => {
    const v = rest[i];
    if (v === undefined) throw new UsageError(`${command} needs ${what}`);
    return v;
  };
  const kind = values.template || values.templates ? { kind: "templates" } : {};
  if (!command || values.help || command === "help") return { action: { action: "help" }, json };
  switch (command) {
    case "call":
      return { action: JSON.parse(need(0, "an action JSON")) as Record<string, unknown>, json: true };
    case "list":
      return { action: { action: "list", ...kind }, json };
    case "inspect":
      return { action: { action: "inspect", name: need(0, "a name"), ...kind }, json };
    case "create":
      return {
        action: { action: "create", name: need(0, "a name"), config: values.config, template: values.from },
        json,
      };
    case "prepare":
      return { action: { action: "prepare", name: need(0, "a template name"), config: values.config }, json };
    case "start":
    case "stop":
      return { action: { action: command, name: need(0, "a name") }, json };
    case "destroy":
      return { action: { action: "destroy", name: need(0, "a name"), confirm: values.confirm ?? "", ...kind }, json };
    case "exec":
      return {
        action: {
          action: "exec",
          name: need(0, "a name"),
          cmd: rest.slice(1).join(" "),
          cwd: values.cwd,
          timeoutMs: int(values.timeout, "--timeout"),
        },
        json,
      };
    case "exec-status":
      return {
        action: {
          action: "exec-status",
          name: need(0, "a name"),
          pid: need(1, "a handle"),
          timeoutMs: int(values.timeout, "--timeout"),
        },
        json,
      };
    case "exec-kill":
      return { action: { action: "exec-kill", name: need(0, "a name"), pid: need(1, "a handle") }, json };
    case "read":
      return { action: { action: "read", name: need(0, "a name"), path: need(1, "a guest path") }, json };
    case "write":
      return {
        action: { action: "write", name: need(0, "a name"), path: need(1, "a guest path"), content: await readStdin() },
        json,
      };
    case "logs":
      return {
        action: { action: "logs", name: need(0, "a name"), service: rest[1], lines: int(values.lines, "--lines") },
        json,
      };
    case "services":
      return { action: { action: "services", name: need(0, "a name"), op: need(1, "an op"), service: rest[2] }, json };
    case "preview":
      return {
        action: {
          action: "preview",
          name: need(0, "a name"),
          port: int(need(1, "a guest port"), "port"),
          title: values.title,
        },
        json,
      };
    case "ssh":
    case "shell":
      return { action: { action: "shell", name: need(0, "a name"), user: rest[1] }, json };
    case "doctor":
      return { action: { action: "doctor", config: values.config }, json };
    default:
      throw new UsageError(`unknown command ${command}`);
  }
}

function dropUndefined(action: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(action).filter(([, v]) => v !== undefined));
}

/** Runs the CLI with `argv` (without node and script); resolves with the exit code. */
export async function runCli(argv: string[]): Promise<number> {
  let parsed: { action: Record<string, unknown>; json: boolean };
  try {
    parsed = await actionFromArgv(argv);
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n\n${USAGE}\n`);
    return 2;
  }
  const { action, json } = parsed;
  if (action.action === "help" && !json) {
    process.stdout.write(`${USAGE}\n\n${renderHelp({ includeUserOnly: true })}\n`);
    return 0;
  }
  const onProgress = (event: ProgressEvent) => {
    if (!json) process.stderr.write(`[${event.stage}] ${event.message}\n`);
  };
  try {
    const result = await callAction(dropUndefined(action), { onProgress, caller: "user" });
    process.stdout.write(json ? `${JSON.stringify(result, null, 2)}\n` : formatResult(String(action.action), result));
    // doctor reports problems as data; the exit code still tells scripts whether all is well.
    if (action.action === "doctor" && (result as { ok?: boolean }).ok === false) return 1;
    return 0;
  } catch (error) {
    const body = isControllerError(error)
      ? error.toJSON()
      : { code: "CONTROLLER_INTERNAL", message: (error as Error).message ?? String(error) };
    if (json) process.stderr.write(`${JSON.stringify({ error: body })}\n`);
    else
      process.stderr.write(
        `error ${body.code}: ${body.message}${"hint" in body && body.hint ? `\nhint: ${body.hint}` : ""}\n`,
      );
    return 1;
  }
}
