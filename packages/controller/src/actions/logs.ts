// The logs action: a service's log from the guest, or the instance's controller log from the host,
// as a tail or followed with a cursor; `--since` (controller log only) takes durations and times.
import * as v from "valibot";
import { LIMITS } from "@pi-sandbox/config";
import type { LogFollowed, LogTail } from "@pi-sandbox/supervisor";
import { inspectEntry } from "../state/inspect.js";
import { ControllerError } from "../errors.js";
import { UsageError, defineAction } from "./kit/define.js";
import { LOG_CURSOR, hostLogSince, hostLogTail, hostLogTailSince } from "./host-log-follow.js";
import { actionSchema, arg, intOption, name, nameArg, positional, text } from "./kit/parts.js";
import { line, oneLine } from "./kit/text.js";

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

/** Why `since` is refused for a service log. */
const SERVICE_SINCE =
  "since works for the controller log only: a service log keeps what the service printed, as printed, with no time of its own";

/** `--since 10m`, `1h30m`, `2d` or a timestamp (`2026-01-31T12:00:00Z`, `2026-01-31`) as an ISO time. */
export function sinceOption(value: string | boolean | string[] | undefined, now = Date.now()): string | undefined {
  if (typeof value !== "string") return undefined;
  const units: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
  if (/^(\d+[smhd])+$/.test(value)) {
    let ms = 0;
    for (const [, n, unit] of value.matchAll(/(\d+)([smhd])/g)) ms += Number(n) * units[unit!]!;
    return new Date(now - ms).toISOString();
  }
  const time = /^\d{4}-\d\d-\d\d([T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?)?$/.test(value)
    ? Date.parse(value)
    : NaN;
  if (Number.isNaN(time)) {
    throw new UsageError(
      `--since takes a duration such as 10m, 1h30m or 2d, or a time such as 2026-01-31T12:00:00Z; got ${value}`,
    );
  }
  return new Date(time).toISOString();
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
    arg(
      "since",
      "string",
      false,
      `controller log only: its lines written at or after this ISO time (e.g. 2026-01-31T12:00:00Z), the rotated file included, at most \`lines\` (default ${LIMITS.logLinesMax}); service logs record no times`,
      "none",
    ),
  ],
  route: "daemon",
  schema: actionSchema("logs", {
    name,
    service: v.optional(text),
    lines: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(LIMITS.logLinesMax))),
    follow: v.optional(v.boolean()),
    cursor: v.optional(v.pipe(v.string(), v.regex(LOG_CURSOR, "is not a cursor from an earlier logs result"))),
    since: v.optional(v.pipe(v.string(), v.isoTimestamp("is not an ISO time such as 2026-01-31T12:00:00Z"))),
  }),
  refine(args) {
    if (args.since === undefined) return;
    if (args.service !== undefined) {
      throw new ControllerError("CONTROLLER_BAD_INPUT", SERVICE_SINCE, {
        hint: "Leave out since, or read the controller log (no service) since a time.",
      });
    }
    if (args.cursor !== undefined) {
      throw new ControllerError(
        "CONTROLLER_BAD_INPUT",
        "since and cursor cannot be combined: a cursor already says where to start",
        {
          hint: "Pass since on the first read only.",
        },
      );
    }
  },
  cli: {
    usage: "logs <name> [service] [-n lines] [-f] [--since TIME] [-t]   a service's log, or the controller log",
    options: {
      lines: { type: "string", short: "n", value: "N", description: "how many of the last lines to show first" },
      follow: {
        type: "boolean",
        short: "f",
        description: "then print lines as they are written, until Ctrl-C",
      },
      since: {
        type: "string",
        value: "10m|2026-01-31T12:00:00Z",
        description: "controller log only: lines written since a duration ago (s, m, h, d) or a time",
      },
      timestamps: {
        type: "boolean",
        short: "t",
        description: "service log with -f: prefix each new line with the time pi-sandbox received it",
      },
    },
    toAction: (input) => {
      const service = input.positionals[1];
      if (service !== undefined && input.values.since !== undefined) throw new UsageError(`--since: ${SERVICE_SINCE}`);
      if (service !== undefined && input.values.timestamps === true && input.values.follow !== true) {
        throw new UsageError(
          "--timestamps on a service log needs -f: its lines carry no time, so only the time each line reaches pi-sandbox can be shown",
        );
      }
      return {
        action: "logs",
        name: positional(input, 0, "a name", "logs"),
        service,
        lines: intOption(input.values.lines, "--lines"),
        follow: input.values.follow === true ? true : undefined,
        since: sinceOption(input.values.since),
      };
    },
    run: (input) =>
      input.values.follow === true
        ? {
            kind: "follow-logs",
            ...(input.values.timestamps === true && input.positionals[1] !== undefined ? { stampReceived: true } : {}),
          }
        : undefined,
    notes: [
      "-f follows across the log's rotations and the service's restarts (each read brings at most",
      "64 KiB; a read every 0.5 s when idle).",
      "Times: each controller log line starts with the time it was written (--timestamps adds nothing;",
      "--since filters by it). A service log holds what the service printed, as printed, with no time",
      "of its own: --since is refused for it, and --timestamps (with -f only) prefixes the lines that",
      "arrive while following with the time pi-sandbox received them (polled every 0.5 s: close to,",
      "never before, their writing); the tail printed first is left as it is. With --json each read",
      "after the tail carries receivedAt.",
    ],
  },
  runLocally(args, ctx): Promise<ServiceLogRead | ControllerLogTail> | undefined {
    if (args.service !== undefined) return undefined;
    return (async () => {
      await ctx.layout.ensurePrivate();
      await inspectEntry(ctx.layout, "instances", args.name);
      const file = ctx.layout.logFile("instances", args.name);
      if (args.since !== undefined) {
        const tail = await hostLogTailSince(file, args.since, args.lines ?? LIMITS.logLinesMax);
        const read = { name: args.name, log: "controller" as const, file, lines: tail.lines };
        return args.follow ? { ...read, cursor: tail.cursor, more: false } : read;
      }
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
