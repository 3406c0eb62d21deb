import { readFile } from "node:fs/promises";
import * as v from "valibot";
import { LIMITS } from "@pi-sandbox/config";
import type { LogTail } from "@pi-sandbox/supervisor";
import { inspectEntry } from "../state/inspect.js";
import { defineAction } from "./define.js";
import { actionSchema, arg, intOption, name, nameArg, positional, text } from "./parts.js";
import { line, oneLine } from "./text.js";

/** The controller log's tail, read from the state directory without a daemon. */
export interface ControllerLogTail {
  /** Instance name. */
  name: string;
  /** Always `controller`. */
  log: "controller";
  /** Host path of the log. */
  file: string;
  /** The last lines, oldest first. */
  lines: string[];
}

/** `logs`: a service's log tail (from the guest), or the controller log (from the host). */
export const logs = defineAction({
  name: "logs",
  summary: "tail of a service's log, or of the controller log",
  args: [
    nameArg,
    arg("service", "string", false, "service name; omitted = controller log"),
    arg("lines", "integer", false, `default ${LIMITS.logLinesDefault}, max ${LIMITS.logLinesMax}`),
  ],
  route: "daemon",
  schema: actionSchema("logs", {
    name,
    service: v.optional(text),
    lines: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(LIMITS.logLinesMax))),
  }),
  cli: {
    usage: "logs <name> [service] [-n lines]",
    options: { lines: { type: "string", short: "n" } },
    toAction: (input) => ({
      action: "logs",
      name: positional(input, 0, "a name", "logs"),
      service: input.positionals[1],
      lines: intOption(input.values.lines, "--lines"),
    }),
  },
  runLocally(args, ctx): Promise<LogTail | ControllerLogTail> | undefined {
    if (args.service !== undefined) return undefined;
    return (async () => {
      await ctx.layout.ensurePrivate();
      await inspectEntry(ctx.layout, "instances", args.name);
      const count = args.lines ?? LIMITS.logLinesDefault;
      const file = ctx.layout.logFile("instances", args.name);
      let content = "";
      try {
        content = await readFile(file, "utf8");
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
      }
      const all = content.split("\n");
      if (all.at(-1) === "") all.pop();
      return { name: args.name, log: "controller" as const, file, lines: all.slice(-count) };
    })();
  },
  run: (args, ctx): Promise<LogTail | ControllerLogTail> =>
    ctx.guest.supervisor().logs(args.service ?? "", { lines: args.lines }),
  // A service log is multi-line guest text (the CLI escapes its controls but keeps lines and tabs);
  // a controller log line is one entry, so anything in it that would break the line is escaped.
  formatText: (result) => ("text" in result ? line(result.text) : result.lines.map(oneLine).join("\n") + "\n"),
});
