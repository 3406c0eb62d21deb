// exec, exec-status and exec-kill: commands in the guest, with handles for the ones still running.

import { readFileSync } from "node:fs";
import * as v from "valibot";
import { ENV_NAME_PATTERN, LIMITS } from "@pi-sandbox/config";
import type { ExecKillResult, ExecResult } from "@pi-sandbox/supervisor";
import { UsageError, defineAction, type CliInput } from "./kit/define.js";
import {
  actionSchema,
  arg,
  GUEST_PATH,
  intOption,
  name,
  nameArg,
  positional,
  text,
  timeoutArg,
  waitMs,
} from "./kit/parts.js";
import { commandLine } from "./kit/shell-words.js";
import { oneLine } from "./kit/text.js";

/** An exec result as the action API names it: the opaque handle is `pid`. */
export type ExecView = Omit<ExecResult, "handle"> & { pid: string };

function execView(result: ExecResult): ExecView {
  const { handle, ...rest } = result;
  return { pid: handle, ...rest };
}

function formatExec(result: ExecView, input?: Record<string, unknown>): string {
  if (result.running) {
    const instance = typeof input?.name === "string" ? oneLine(input.name) : "<name>";
    return `${result.output}[still running; follow with: pi-sandbox exec-status ${instance} ${result.pid}]\n`;
  }
  return `${result.output}${result.exitCode !== 0 ? `[exit ${String(result.exitCode)}]\n` : ""}`;
}

function briefExec(result: ExecView): string | undefined {
  if (result.running) return `still running, pid ${result.pid}`;
  return typeof result.exitCode === "number" ? `exit ${result.exitCode}` : undefined;
}

const envSchema = v.record(
  v.pipe(
    v.string(),
    v.regex(ENV_NAME_PATTERN, "is not a variable name (letters, digits and _, not starting with a digit)"),
  ),
  v.pipe(
    v.string(),
    v.check((value: string) => !value.includes("\0"), "must not contain a NUL character"),
  ),
);

/** `--env NAME=value` options as an env object (the action's schema checks the names). */
/**
 * The variables of an --env-file, in docker's format: `NAME=value` lines taken literally (no
 * quotes removed), `NAME` alone takes the host's value if it has one, blank and `#` lines skipped.
 */
export function parseEnvFile(text: string, hostEnv: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const env: Record<string, string> = {};
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trimStart();
    if (line === "" || line.startsWith("#")) continue;
    const eq = line.indexOf("=");
    if (eq === 0) throw new UsageError(`--env-file: a line without a name: ${line}`);
    if (eq > 0) env[line.slice(0, eq)] = line.slice(eq + 1);
    else if (hostEnv[line.trimEnd()] !== undefined) env[line.trimEnd()] = hostEnv[line.trimEnd()]!;
  }
  return env;
}

function envOption(input: CliInput): Record<string, string> | undefined {
  const entries = input.values.env;
  const file = input.values["env-file"];
  let fromFile: Record<string, string> = {};
  if (typeof file === "string") {
    try {
      fromFile = parseEnvFile(readFileSync(file, "utf8"));
    } catch (error) {
      if (error instanceof UsageError) throw error;
      throw new UsageError(`--env-file: cannot read ${file} (${(error as Error).message})`);
    }
  }
  if (!Array.isArray(entries) || entries.length === 0) return Object.keys(fromFile).length > 0 ? fromFile : undefined;
  // -e wins over the file, as in docker.
  const env: Record<string, string> = { ...fromFile };
  for (const entry of entries) {
    const eq = entry.indexOf("=");
    if (eq <= 0) throw new UsageError(`--env takes NAME=value; got ${entry}`);
    env[entry.slice(0, eq)] = entry.slice(eq + 1);
  }
  return env;
}

/** `exec`: run a command in a guest login shell. */
export const exec = defineAction({
  name: "exec",
  summary: "run a command in a guest login shell; returns output, or a handle if still running",
  args: [
    nameArg,
    arg("cmd", "string", true, "shell command"),
    arg("cwd", "string", false, "workspace-relative directory, default the workspace", GUEST_PATH),
    arg("env", "object", false, "NAME -> string, added to the command's environment"),
    arg(
      "separateStderr",
      "boolean",
      false,
      "default false: stdout and stderr interleaved in `output`; true: `output` is stdout, `stderr` (with `stderrTruncatedBytes`) is stderr, in this result and in exec-status results of its handle",
    ),
    timeoutArg,
  ],
  route: "daemon",
  schema: actionSchema("exec", {
    name,
    cmd: text,
    cwd: v.optional(v.string()),
    env: v.optional(envSchema),
    separateStderr: v.optional(v.boolean()),
    timeoutMs: v.optional(waitMs),
  }),
  cli: {
    usage:
      "exec <name> [-w dir] [-e K=V]… [--env-file f] [-u user] [-d] [-i] [-t] -- <command> [args…]   run a command",
    options: {
      cwd: { type: "string", short: "w", value: "dir", description: "working directory, relative to the workspace" },
      env: { type: "string", short: "e", multiple: true, value: "NAME=value", description: "set a variable" },
      "env-file": {
        type: "string",
        value: "file",
        description: "NAME=value lines (docker's format: # comments, NAME alone takes the host's value); -e wins",
      },
      user: {
        type: "string",
        short: "u",
        value: "user",
        description: "run as user via runuser -u user -- sh -c '<command>' (root otherwise)",
      },
      detach: {
        type: "boolean",
        short: "d",
        description: `print the handle and return at once (or after --timeout ms, at most ${LIMITS.execWaitMaxMs})`,
      },
      interactive: { type: "boolean", short: "i", description: "forward stdin (over ssh, see shell)" },
      tty: { type: "boolean", short: "t", description: "a terminal, like shell (-it: with stdin)" },
      timeout: {
        type: "string",
        value: "ms",
        description: "without -d: stop following after ms and print the handle (the command keeps running)",
      },
    },
    toAction: (input) => {
      const instance = positional(input, 0, "a name", "exec");
      const argv = input.positionals.slice(1);
      if (argv.length === 0) throw new UsageError("exec needs a command after --");
      if (input.values.detach && (input.values.interactive || input.values.tty))
        throw new UsageError("exec -d cannot take -i or -t");
      return {
        action: "exec",
        name: instance,
        // -u: the guest agent runs commands as root; runuser (util-linux) switches to the user.
        cmd:
          typeof input.values.user === "string"
            ? commandLine(["runuser", "-u", input.values.user, "--", "sh", "-c", commandLine(argv)])
            : commandLine(argv),
        cwd: input.values.cwd,
        env: envOption(input),
        // Followed, guest stdout goes to stdout and stderr to stderr; a detached result is one text.
        separateStderr: input.values.detach ? undefined : true,
        // Detached, the one call waits --timeout (default not at all); followed, the CLI picks its waits.
        timeoutMs: input.values.detach ? (intOption(input.values.timeout, "--timeout") ?? 0) : undefined,
      };
    },
    run: (input) =>
      input.values.interactive || input.values.tty
        ? { kind: "interactive", tty: input.values.tty === true }
        : input.values.detach
          ? undefined
          : { kind: "follow", timeoutMs: intOption(input.values.timeout, "--timeout") },
    notes: [
      "Waits until the command ends, streaming its output, and exits with its exit code (128+N after",
      "signal N). Several words after -- are passed as arguments, each quoted for the guest shell; one",
      "word is a shell command line (exec demo -- 'npm test | tail').",
      "A detached command is followed with exec-status and ended with exec-kill.",
      "(Node itself checks every --env-file on its command line: a missing one fails with node's exit 9.)",
      "--json: one result when following ends, its output that of every call.",
      "Ctrl-C ends the command (its whole process group) and exits 130; a second Ctrl-C detaches.",
      "Guest stdout goes to stdout and stderr to stderr (with -d, one text of both). Control characters",
      "in the output are escaped.",
      "-i: forward stdin; -t (or -it): a terminal, like shell, which the guest's output reaches raw.",
      "  Both run the command over the instance's ssh access (see shell) in a login shell, in the same",
      "  directory and with the same -e variables; the exit code is the command's (255: ssh failed).",
      "Exit codes, as docker exec's: the command's; 126 cannot run it and 127 not found (the guest",
      "  shell's); 125 when pi-sandbox itself failed (a usage error, no such instance, not running, …).",
    ],
  },
  run: async (args, ctx) =>
    execView(
      await ctx.guest.supervisor().exec(args.cmd, {
        cwd: args.cwd,
        env: args.env,
        timeoutMs: args.timeoutMs,
        separateStderr: args.separateStderr,
      }),
    ),
  formatText: formatExec,
  brief: briefExec,
});

/** `exec-status`: wait for a running command. */
export const execStatus = defineAction({
  name: "exec-status",
  summary: "wait for a running command; returns only output not returned before",
  args: [nameArg, arg("pid", "string", true, "handle returned by exec"), timeoutArg],
  route: "daemon",
  schema: actionSchema("exec-status", { name, pid: text, timeoutMs: v.optional(waitMs) }),
  cli: {
    usage: "exec-status <name> <handle> [--timeout ms]   wait for a detached command",
    options: {
      timeout: {
        type: "string",
        value: "ms",
        description: `how long to wait for the command to end (max ${LIMITS.execWaitMaxMs})`,
      },
    },
    toAction: (input) => ({
      action: "exec-status",
      name: positional(input, 0, "a name", "exec-status"),
      pid: positional(input, 1, "a handle", "exec-status"),
      timeoutMs: intOption(input.values.timeout, "--timeout"),
    }),
  },
  run: async (args, ctx) => execView(await ctx.guest.supervisor().execStatus(args.pid, { timeoutMs: args.timeoutMs })),
  formatText: formatExec,
  brief: briefExec,
});

/** `exec-kill`: end a running command and its process group. */
export const execKill = defineAction({
  name: "exec-kill",
  summary: "terminate a running command and its whole process group",
  args: [nameArg, arg("pid", "string", true, "handle returned by exec")],
  route: "daemon",
  schema: actionSchema("exec-kill", { name, pid: text }),
  cli: {
    usage: "exec-kill <name> <handle>   end a detached command",
    toAction: (input) => ({
      action: "exec-kill",
      name: positional(input, 0, "a name", "exec-kill"),
      pid: positional(input, 1, "a handle", "exec-kill"),
    }),
  },
  run: (args, ctx): Promise<ExecKillResult> => ctx.guest.supervisor().execKill(args.pid),
  brief: (result) => (result.killed ? "killed" : result.running ? "still running" : `exit ${String(result.exitCode)}`),
});
