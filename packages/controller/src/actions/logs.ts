import * as v from "valibot";
import { LIMITS } from "@pi-sandbox/config";
import type { LogFollowed, LogTail } from "@pi-sandbox/supervisor";
import { inspectEntry } from "../state/inspect.js";
import { defineAction } from "./define.js";
import { LOG_CURSOR, hostLogSince, hostLogTail } from "./host-log-follow.js";
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
  /** The last lines (or, after `cursor`, the new ones), oldest first. */
  lines: string[];
  /** With `follow` or `cursor`: pass back as `cursor` to get the lines written next. */
  cursor?: string;
  /** With `follow` or `cursor`: more is already waiting after `cursor`. */
  more?: boolean;
}

/** A service log read: a tail, or with `follow`/`cursor` a followed read carrying its cursor. */
export type ServiceLogRead = LogTail | LogFollowed;

/** `logs`: a service's log tail (from the guest), or the controller log (from the host). */
export const logs = defineAction({
  name: "logs",
  summary: "tail of a service's log, or of the controller log; with follow/cursor, what came next",
  args: [
    nameArg,
    arg("service", "string", false, "service name; omitted = controller log"),
    arg("lines", "integer", false, `default ${LIMITS.logLinesDefault}, max ${LIMITS.logLinesMax}`),
    arg("follow", "boolean", false, "also return a `cursor` (and `more`) for reading what is written next"),
    arg(
      "cursor",
      "string",
      false,
      `the cursor of an earlier result: only what was written after it (at most ${LIMITS.outputMaxBytes / 1024} KiB; \`more\` says more is waiting), across log rotations and service restarts`,
    ),
  ],
  route: "daemon",
  schema: actionSchema("logs", {
    name,
    service: v.optional(text),
    lines: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(LIMITS.logLinesMax))),
    follow: v.optional(v.boolean()),
    cursor: v.optional(v.pipe(v.string(), v.regex(LOG_CURSOR, "is not a cursor from an earlier logs result"))),
  }),
  cli: {
    usage: "logs <name> [service] [-n lines] [-f]   a service's log, or the controller log",
    options: {
      lines: { type: "string", short: "n", value: "N", description: "how many of the last lines to show first" },
      follow: {
        type: "boolean",
        short: "f",
        description: "then print lines as they are written, until Ctrl-C",
      },
    },
    toAction: (input) => ({
      action: "logs",
      name: positional(input, 0, "a name", "logs"),
      service: input.positionals[1],
      lines: intOption(input.values.lines, "--lines"),
      follow: input.values.follow === true ? true : undefined,
    }),
    run: (input) => (input.values.follow === true ? { kind: "follow-logs" } : undefined),
    notes: [
      "-f follows across the log's rotations and the service's restarts (each read brings at most",
      "64 KiB; a read every 0.5 s when idle).",
    ],
  },
  runLocally(args, ctx): Promise<ServiceLogRead | ControllerLogTail> | undefined {
    if (args.service !== undefined) return undefined;
    return (async () => {
      await ctx.layout.ensurePrivate();
      await inspectEntry(ctx.layout, "instances", args.name);
      const file = ctx.layout.logFile("instances", args.name);
      if (args.cursor !== undefined) {
        const read = await hostLogSince(file, args.cursor);
        return { name: args.name, log: "controller" as const, file, ...read };
      }
      const count = args.lines ?? LIMITS.logLinesDefault;
      const tail = await hostLogTail(file, count);
      const read = { name: args.name, log: "controller" as const, file, lines: tail.lines };
      return args.follow ? { ...read, cursor: tail.cursor, more: false } : read;
    })();
  },
  run: (args, ctx): Promise<ServiceLogRead | ControllerLogTail> =>
    args.follow || args.cursor !== undefined
      ? ctx.guest.supervisor().followLogs(args.service ?? "", { lines: args.lines, cursor: args.cursor })
      : ctx.guest.supervisor().logs(args.service ?? "", { lines: args.lines }),
  // A service log is multi-line guest text (the CLI escapes its controls but keeps lines and tabs);
  // a controller log line is one entry, so anything in it that would break the line is escaped.
  formatText: (result) => ("text" in result ? line(result.text) : result.lines.map((l) => `${oneLine(l)}\n`).join("")),
});
