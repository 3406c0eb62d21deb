import * as v from "valibot";
import type { EntryView } from "../state/inspect.js";
import { listEntries } from "../state/inspect.js";
import { defineAction } from "./define.js";
import { actionSchema, arg, kind, kindOption } from "./parts.js";
import { table } from "./text.js";

/** `list`: instances or templates with their state. */
export const list = defineAction({
  name: "list",
  summary: "list instances (or templates) with their state",
  args: [arg("kind", '"instances"|"templates"', false, "which namespace, default instances")],
  route: "local",
  schema: actionSchema("list", { kind: v.optional(kind) }),
  cli: {
    usage: "list [--templates]                   instances (or templates) and their state",
    aliases: ["ls"],
    options: { templates: { type: "boolean" }, template: { type: "boolean" } },
    toAction: (input) => ({ action: "list", ...kindOption(input) }),
  },
  async run(args, ctx): Promise<{ instances: EntryView[] } | { templates: EntryView[] }> {
    await ctx.layout.ensurePrivate();
    const which = args.kind ?? "instances";
    const views = await listEntries(ctx.layout, which);
    return which === "templates" ? { templates: views } : { instances: views };
  },
  formatText(result) {
    const views = "templates" in result ? result.templates : result.instances;
    if (views.length === 0) return `no ${"templates" in result ? "templates" : "instances"}\n`;
    return table([
      ["NAME", "STATE", "CPUS", "MEMORY", "DISK", "PREVIEW"],
      ...views.map((view) => [
        view.name,
        view.state,
        String(view.resources.cpus),
        `${view.resources.memoryGiB} GiB`,
        `${view.diskGiB} GiB`,
        view.previews[0]?.url ?? "",
      ]),
    ]);
  },
  brief(result) {
    const [key, views] = "templates" in result ? ["templates", result.templates] : ["instances", result.instances];
    return `${views.length} ${views.length === 1 ? key.slice(0, -1) : key}`;
  },
});
