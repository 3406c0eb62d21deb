// The list action: every instance's (or template's) view, with what each running QEMU costs.
import * as v from "valibot";
import type { EntryView } from "../state/inspect.js";
import { listEntries } from "../state/inspect.js";
import { addUsage } from "../state/usage.js";
import { UsageError, defineAction } from "./kit/define.js";
import { actionSchema, arg, kind, kindOption } from "./kit/parts.js";
import { formatMiB, stateText, table } from "./kit/text.js";

/**
 * A docker-style `--format` template of an entry: `{{.Name}}` is the field `name`, `{{.Resources.Cpus}}`
 * a nested one; objects print as JSON, absent fields as nothing. Unknown syntax is a usage error.
 */
export function entryTemplate(template: string): (view: EntryView) => string {
  const parts = template.split(/(\{\{[^}]*\}\})/);
  for (const part of parts)
    if (part.startsWith("{{") && !/^\{\{\s*(\.[A-Za-z]\w*)+\s*\}\}$/.test(part))
      throw new UsageError(`--format: ${part} is not a field such as {{.Name}}`);
  return (view) =>
    parts
      .map((part) => {
        if (!part.startsWith("{{")) return part;
        let value: unknown = view;
        for (const key of part
          .replace(/[{}\s]/g, "")
          .split(".")
          .slice(1)) {
          const field = key[0]!.toLowerCase() + key.slice(1);
          value = value !== null && typeof value === "object" ? (value as Record<string, unknown>)[field] : undefined;
        }
        return value === undefined || value === null
          ? ""
          : typeof value === "object"
            ? JSON.stringify(value)
            : String(value);
      })
      .join("");
}

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
    options: {
      templates: { type: "boolean", description: "list templates instead of instances" },
      template: { type: "boolean", description: "the same as --templates" },
      quiet: { type: "boolean", short: "q", description: "names only, one a line" },
      format: {
        type: "string",
        value: "template",
        description: "one line per entry from a template such as '{{.Name}} {{.State}}', or json (see below)",
      },
    },
    toAction: (input) => {
      if (input.values.quiet && input.values.format !== undefined) throw new UsageError("list -q cannot take --format");
      return { action: "list", ...kindOption(input) };
    },
    print(input) {
      const format = input.values.format;
      if (!input.values.quiet && typeof format !== "string") return undefined;
      const render = input.values.quiet
        ? (view: EntryView) => view.name
        : format === "json"
          ? (view: EntryView) => JSON.stringify(view)
          : entryTemplate(String(format));
      return (result: { instances: EntryView[] } | { templates: EntryView[] }) =>
        ("templates" in result ? result.templates : result.instances).map((view) => `${render(view)}\n`).join("");
    },
    notes: [
      "--format's template names any field of list --json, first letter either case: {{.Name}},",
      "{{.State}}, {{.Resources.Cpus}}, {{.Previews}}, …; --format json prints one JSON object a line.",
    ],
  },
  async run(args, ctx): Promise<{ instances: EntryView[] } | { templates: EntryView[] }> {
    await ctx.layout.ensurePrivate();
    const which = args.kind ?? "instances";
    const views = await listEntries(ctx.layout, which);
    await addUsage(ctx.layout, views);
    return which === "templates" ? { templates: views } : { instances: views };
  },
  formatText(result) {
    const views = "templates" in result ? result.templates : result.instances;
    if (views.length === 0) return `no ${"templates" in result ? "templates" : "instances"}\n`;
    return table([
      ["NAME", "STATE", "CPUS", "MEMORY", "DISK", "CPU %", "RSS", "PREVIEW"],
      ...views.map((view) => [
        view.name,
        stateText(view),
        String(view.resources.cpus),
        `${view.resources.memoryGiB} GiB`,
        `${view.diskGiB} GiB`,
        view.usage ? `${view.usage.cpuPercent.toFixed(1)}` : "",
        view.usage ? formatMiB(view.usage.rssBytes) : "",
        view.previews[0]?.url ?? "",
      ]),
    ]);
  },
  brief(result) {
    const [key, views] = "templates" in result ? ["templates", result.templates] : ["instances", result.instances];
    return `${views.length} ${views.length === 1 ? key.slice(0, -1) : key}`;
  },
});
