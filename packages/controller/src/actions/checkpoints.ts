// Kept checkpoints of an instance: `checkpoint` keeps its state now (disk, or memory and disk),
// `checkpoints` lists them, `checkpoint-rm` removes one, `rewind` brings the instance back to one.
// Their work happens in the instance's daemon (daemon/branches.ts), queued with the lifecycle; the
// list is read from the disk directory here.

import * as v from "valibot";
import { leftOutText, listCheckpoints } from "../state/checkpoints.js";
import { notFound } from "../state/inspect.js";
import { readRecord } from "../state/records.js";
import type { CheckpointView } from "./kit/context.js";
import { defineAction } from "./kit/define.js";
import { actionSchema, arg, label, name, nameArg, positional, text } from "./kit/parts.js";
import { formatView, oneLine, table } from "./kit/text.js";

/** A checkpoint's label: printed and matched, never a path; at most 100 characters. */
const checkpointLabel = v.pipe(label, v.minLength(1), v.maxLength(100));
/** The checkpoint an action names: its 12-hex id or its label. */
const target = v.pipe(text, v.maxLength(100));
const targetArg = arg("checkpoint", "string", true, "a checkpoint's id (12 hex digits) or label (the newest with it)");

function bytesText(bytes: number): string {
  return bytes >= 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(1)} GiB` : `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

function checkpointLine(c: CheckpointView): string {
  return `${c.id} ${c.kind}${c.label ? ` ${JSON.stringify(c.label)}` : ""}${c.pinned ? " pinned" : ""}`;
}

/** `checkpoint`: keep the instance's state now. */
export const checkpoint = defineAction({
  name: "checkpoint",
  summary:
    "keep the instance's state now as a checkpoint to rewind to or fork from: its disk (the guest's disk waits a few ms), or with memory its processes too (saved while the guest runs, which pauses only for the last of it)",
  args: [
    nameArg,
    arg("label", "string", false, "a name for it (up to 100 characters); rewind takes it instead of the id"),
    arg("memory", "boolean", false, "keep the guest's memory too: a rewind resumes its processes"),
    arg("pin", "boolean", false, "never remove it to stay within checkpoint.keep and keepGiB"),
  ],
  route: "spawn",
  lifecycle: "queued",
  long: true,
  schema: actionSchema("checkpoint", {
    name,
    label: v.optional(checkpointLabel),
    memory: v.optional(v.boolean()),
    pin: v.optional(v.boolean()),
  }),
  cli: {
    usage: "checkpoint <name> [--label L] [--memory] [--pin]   keep an instance's state to rewind to",
    options: {
      label: {
        type: "string",
        short: "l",
        value: "label",
        description: "a name for it; rewind takes it instead of the id",
      },
      memory: { type: "boolean", description: "keep the guest's memory too (rewind resumes its processes)" },
      pin: { type: "boolean", description: "never prune it (checkpoint.keep and keepGiB)" },
    },
    toAction: (input) => ({
      action: "checkpoint",
      name: positional(input, 0, "a name", "checkpoint"),
      ...(typeof input.values.label === "string" ? { label: input.values.label } : {}),
      ...(input.values.memory === true ? { memory: true } : {}),
      ...(input.values.pin === true ? { pin: true } : {}),
    }),
    notes: [
      "checkpoint rm <name> <checkpoint> removes one. Without --pin, the oldest go once an instance",
      "holds more than checkpoint.keep (default 30) or they hold more than checkpoint.keepGiB (20).",
    ],
  },
  run: (args, ctx) =>
    ctx.branches.checkpoint({
      ...(args.label !== undefined ? { label: args.label } : {}),
      ...(args.memory ? { memory: true } : {}),
      ...(args.pin ? { pin: true } : {}),
    }),
  formatText: (result) =>
    [
      `kept ${checkpointLine(result.checkpoint)} of ${oneLine(result.name)}`,
      ...(result.stallMs !== undefined ? [`the guest's disk waited ${Math.round(result.stallMs)} ms`] : []),
      ...(result.pauseMs !== undefined ? [`paused ${(result.pauseMs / 1000).toFixed(1)} s`] : []),
      ...(result.checkpoint.leftOut ? [leftOutText(result.checkpoint.leftOut)] : []),
      ...result.pruned.map((c) => `removed the older ${checkpointLine(c)}`),
    ]
      .map(oneLine)
      .join("\n") + "\n",
  brief: (result) => `checkpoint ${result.checkpoint.id}`,
});

/** What `checkpoints` lists. */
export interface CheckpointList {
  name: string;
  checkpoints: CheckpointView[];
  /** Host bytes all of them hold beyond the instance's current disk. */
  bytes: number;
}

/** `checkpoints`: the kept checkpoints of an instance, oldest first. */
export const checkpoints = defineAction({
  name: "checkpoints",
  summary: "list an instance's kept checkpoints, oldest first: id, kind, label, time and the bytes only they hold",
  args: [nameArg],
  route: "local",
  schema: actionSchema("checkpoints", { name }),
  cli: {
    usage: "checkpoints <name>                   list kept checkpoints",
    toAction: (input) => ({ action: "checkpoints", name: positional(input, 0, "a name", "checkpoints") }),
  },
  run: async (args, ctx): Promise<CheckpointList> => {
    if (!(await readRecord(ctx.layout, "instances", args.name))) throw notFound("instances", args.name);
    const views = await listCheckpoints(ctx.layout, args.name);
    return { name: args.name, checkpoints: views, bytes: views.reduce((sum, c) => sum + c.bytes, 0) };
  },
  formatText: (result) =>
    result.checkpoints.length === 0
      ? `${oneLine(result.name)} has no kept checkpoints\n`
      : table([
          ["ID", "KIND", "TAKEN", "SIZE", "LABEL"],
          ...result.checkpoints.map((c) => [
            c.id,
            c.kind + (c.pinned ? " (pinned)" : ""),
            c.createdAt.replace("T", " ").slice(0, 19),
            bytesText(c.bytes),
            c.label ?? "",
          ]),
        ]) +
        `${bytesText(result.bytes)} held beyond the current disk\n` +
        result.checkpoints
          .filter((c) => c.leftOut)
          .map((c) => `${c.id}: ${leftOutText(c.leftOut!, 3)}\n`)
          .join(""),
  brief: (result) => `${result.checkpoints.length} checkpoint(s)`,
});

/** `checkpoint-rm`: remove one. */
export const checkpointRm = defineAction({
  name: "checkpoint-rm",
  summary: "remove a kept checkpoint (its id or label); the layers it alone held are freed",
  args: [nameArg, targetArg],
  route: "spawn",
  lifecycle: "queued",
  long: true,
  schema: actionSchema("checkpoint-rm", { name, checkpoint: target }),
  cli: {
    usage: "checkpoint rm <name> <checkpoint>    remove a kept checkpoint",
    toAction: (input) => ({
      action: "checkpoint-rm",
      name: positional(input, 0, "a name", "checkpoint rm"),
      checkpoint: positional(input, 1, "a checkpoint id or label", "checkpoint rm"),
    }),
  },
  run: (args, ctx) => ctx.branches.removeCheckpoint(args.checkpoint),
  formatText: (result) => `removed ${oneLine(checkpointLine(result.removed))} of ${oneLine(result.name)}\n`,
});

/** `rewind`: back to a kept checkpoint. */
export const rewind = defineAction({
  name: "rewind",
  summary:
    "bring an instance back to a kept checkpoint and start it: a memory checkpoint resumes its processes, a disk one boots its disk (setup skipped, resume hooks run). The state it leaves is kept as a checkpoint first",
  args: [nameArg, targetArg],
  route: "spawn",
  lifecycle: "start",
  long: true,
  irreversible: true,
  schema: actionSchema("rewind", { name, checkpoint: target }),
  cli: {
    usage: "rewind <name> <checkpoint>           bring an instance back to a kept checkpoint",
    toAction: (input) => ({
      action: "rewind",
      name: positional(input, 0, "a name", "rewind"),
      checkpoint: positional(input, 1, "a checkpoint id or label", "rewind"),
    }),
    notes: ['What the instance held is kept first as a checkpoint labelled "before rewind to …".'],
  },
  run: (args, ctx) => ctx.branches.rewind(args.checkpoint),
  formatText: (result) =>
    `rewound to ${oneLine(checkpointLine(result.rewound))}${
      result.before ? `; the state it left is ${oneLine(checkpointLine(result.before))}` : ""
    }\n` + formatView(result),
});
