// The inspect action: one entry's view from the state files, with what its QEMU costs while it runs.
import * as v from "valibot";
import { inspectEntry, type EntryView } from "../state/inspect.js";
import { addUsage } from "../state/usage.js";
import { defineAction } from "./kit/define.js";
import { actionSchema, kind, kindArg, kindOption, name, nameArg, positional } from "./kit/parts.js";
import { formatView } from "./kit/text.js";

/** `inspect`: one entry's state, resources, accelerator, previews, errors and a recovery hint. */
export const inspect = defineAction({
  name: "inspect",
  summary: "state, resources, disk, accelerator, previews, errors and a recovery hint",
  args: [nameArg, kindArg],
  route: "local",
  schema: actionSchema("inspect", { name, kind: v.optional(kind) }),
  cli: {
    usage: "inspect <name> [--template]          details, previews, errors, recovery hint",
    options: {
      template: { type: "boolean", description: "inspect a template, not an instance" },
      templates: { type: "boolean", description: "the same as --template" },
    },
    toAction: (input) => ({ action: "inspect", name: positional(input, 0, "a name", "inspect"), ...kindOption(input) }),
  },
  async run(args, ctx): Promise<EntryView> {
    await ctx.layout.ensurePrivate();
    const view = await inspectEntry(ctx.layout, args.kind ?? "instances", args.name);
    await addUsage(ctx.layout, [view], { memory: true });
    return view;
  },
  formatText: formatView,
});
