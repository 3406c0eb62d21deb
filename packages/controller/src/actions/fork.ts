// `fork`: copies an instance into new ones. The source's daemon makes the copies (daemon/branches.ts:
// a running source's memory is saved while it runs; a fork of one of its kept checkpoints pauses
// nothing); the client then starts each fork, in parallel, and each start gives its guest its own
// identity.

import * as v from "valibot";
import { ControllerError } from "../errors.js";
import type { ForkResult } from "./kit/context.js";
import { defineAction } from "./kit/define.js";
import { actionSchema, arg, intOption, name, nameArg, positional, text } from "./kit/parts.js";
import { oneLine, table } from "./kit/text.js";

/** Most forks one call makes. */
export const FORKS_MAX = 16;

/** The names of `count` forks of `source`: `source-1` … `source-N`. */
export function forkNames(source: string, count: number): string[] {
  return Array.from({ length: count }, (_, i) => `${source}-${i + 1}`);
}

export const fork = defineAction({
  name: "fork",
  summary:
    "copy a running, suspended or stopped instance into new instances (disk shared copy-on-write; memory too unless stopped) and start them: each resumes where the source was, with its own machine-id, hostname, ssh host keys, random pool, previews and disk. The source keeps running (paused only for the last of its memory)",
  args: [
    nameArg,
    arg("names", "string[]", false, `names of the new instances (1-${FORKS_MAX}); or count`),
    arg("count", "integer", false, `make this many forks named <name>-1 … <name>-N (1-${FORKS_MAX})`),
    arg("start", "boolean", false, "start the forks (default true)"),
    arg(
      "from",
      "string",
      false,
      "fork the source as one of its kept checkpoints was (id, or label: the newest with it) instead of as it is now; the source is not paused",
    ),
  ],
  route: "spawn",
  lifecycle: "queued",
  long: true,
  schema: actionSchema("fork", {
    name,
    names: v.optional(v.pipe(v.array(name), v.minLength(1), v.maxLength(FORKS_MAX))),
    count: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(FORKS_MAX))),
    start: v.optional(v.boolean()),
    from: v.optional(v.pipe(text, v.maxLength(100))),
  }),
  refine(args) {
    if ((args.names === undefined) === (args.count === undefined)) {
      throw new ControllerError("CONTROLLER_BAD_INPUT", "fork needs exactly one of names or count", {
        hint: 'E.g. {"action":"fork","name":"web","count":3} makes web-1, web-2 and web-3.',
        details: { action: "fork" },
      });
    }
  },
  cli: {
    usage: "fork <name> <new>… | --count N [--from CP]   copy an instance into new ones, started",
    options: {
      from: {
        type: "string",
        value: "checkpoint",
        description: "copy a kept checkpoint (id or label) instead of the instance now; no pause",
      },
      count: { type: "string", short: "n", value: "N", description: "make N forks named <name>-1 … <name>-N" },
      "no-start": { type: "boolean", description: "leave the forks suspended (or stopped); start them later" },
    },
    toAction: (input) => {
      const count = intOption(input.values.count, "--count");
      const names = input.positionals.slice(1);
      return {
        action: "fork",
        name: positional(input, 0, "the instance to fork", "fork"),
        ...(count !== undefined ? { count } : { names }),
        ...(input.values["no-start"] === true ? { start: false } : {}),
        ...(typeof input.values.from === "string" ? { from: input.values.from } : {}),
      };
    },
  },
  run: (args, ctx) =>
    ctx.branches.fork(args.names ?? forkNames(args.name, args.count!), {
      ...(args.from !== undefined ? { from: args.from } : {}),
    }),
  // Each fork is started by the client once the source's daemon has made them.
  startsAfter: (result, args) => (args.start === false ? [] : result.forks.map((f) => f.name)),
  formatText: (result: ForkResult) =>
    [
      `forked ${oneLine(result.source)}${result.from ? ` as its checkpoint ${result.from.id}${result.from.label !== undefined ? ` (${oneLine(result.from.label)})` : ""} was` : ""}${result.pauseMs !== undefined ? ` (paused ${(result.pauseMs / 1000).toFixed(1)} s)` : ""}`,
      table([
        ["NAME", "COPIED", "STATE", "PREVIEWS"],
        ...result.forks.map((f) => {
          const view = result.started?.find((s) => s.name === f.name);
          return [f.name, f.kind, view?.state ?? "not started", (view?.previews ?? []).map((p) => p.url).join(" ")];
        }),
      ]).trimEnd(),
    ].join("\n") + "\n",
  brief: (result) => `forked into ${result.forks.map((f) => f.name).join(", ")}`,
});
