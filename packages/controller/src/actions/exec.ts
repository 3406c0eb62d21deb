// exec, exec-status and exec-kill: commands in the guest, with handles for the ones still running.

import * as v from "valibot";
import type { ExecKillResult, ExecResult } from "@pi-sandbox/supervisor";
import { defineAction } from "./define.js";
import { actionSchema, arg, intOption, name, nameArg, positional, text, timeoutArg, waitMs } from "./parts.js";

/** An exec result as the action API names it: the opaque handle is `pid`. */
export type ExecView = Omit<ExecResult, "handle"> & { pid: string };

function execView(result: ExecResult): ExecView {
  const { handle, ...rest } = result;
  return { pid: handle, ...rest };
}

function formatExec(result: ExecView): string {
  if (result.running)
    return `${result.output}[still running; follow with: pi-sandbox exec-status <name> ${result.pid}]\n`;
  return `${result.output}${result.exitCode !== 0 ? `[exit ${String(result.exitCode)}]\n` : ""}`;
}

function briefExec(result: ExecView): string | undefined {
  if (result.running) return `still running, pid ${result.pid}`;
  return typeof result.exitCode === "number" ? `exit ${result.exitCode}` : undefined;
}

/** `exec`: run a command in a guest login shell. */
export const exec = defineAction({
  name: "exec",
  summary: "run a command in a guest login shell; returns output, or a handle if still running",
  args: [
    nameArg,
    arg("cmd", "string", true, "shell command"),
    arg("cwd", "string", false, "workspace-relative directory, default the workspace"),
    timeoutArg,
  ],
  route: "daemon",
  schema: actionSchema("exec", { name, cmd: text, cwd: v.optional(v.string()), timeoutMs: v.optional(waitMs) }),
  cli: {
    usage: "exec <name> [--cwd dir] [--timeout ms] -- <command…>",
    options: { cwd: { type: "string" }, timeout: { type: "string" } },
    toAction: (input) => ({
      action: "exec",
      name: positional(input, 0, "a name", "exec"),
      cmd: input.positionals.slice(1).join(" "),
      cwd: input.values.cwd,
      timeoutMs: intOption(input.values.timeout, "--timeout"),
    }),
  },
  run: async (args, ctx) =>
    execView(await ctx.guest.supervisor().exec(args.cmd, { cwd: args.cwd, timeoutMs: args.timeoutMs })),
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
    usage: "exec-status <name> <handle> [--timeout ms] | exec-kill <name> <handle>",
    options: { timeout: { type: "string" } },
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
    usage: "",
    toAction: (input) => ({
      action: "exec-kill",
      name: positional(input, 0, "a name", "exec-kill"),
      pid: positional(input, 1, "a handle", "exec-kill"),
    }),
  },
  run: (args, ctx): Promise<ExecKillResult> => ctx.guest.supervisor().execKill(args.pid),
  brief: (result) => (result.killed ? "killed" : result.running ? "still running" : `exit ${String(result.exitCode)}`),
});
