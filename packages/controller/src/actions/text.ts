// Plain-text rendering shared by the actions' CLI formatters.

import type { EntryView } from "../state/inspect.js";

/** Left-aligned columns, two spaces apart. */
export function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length)));
  return (
    rows
      .map((r) =>
        r
          .map((c, i) => c.padEnd(widths[i]!))
          .join("  ")
          .trimEnd(),
      )
      .join("\n") + "\n"
  );
}

/** An entry view as `key: value` lines. */
export function formatView(view: EntryView): string {
  const lines = [
    `name:        ${view.name} (${view.kind === "templates" ? "template" : "instance"})`,
    `state:       ${view.state}`,
    `created:     ${view.createdAt}${view.template ? ` from template ${view.template}` : ""}`,
    `resources:   ${view.resources.cpus} cpu, ${view.resources.memoryGiB} GiB memory, ${view.diskGiB} GiB disk`,
  ];
  if (view.accelerator)
    lines.push(`accelerator: ${view.accelerator}${view.acceleratorReason ? ` (${view.acceleratorReason})` : ""}`);
  for (const p of view.previews) lines.push(`preview:     ${p.url}  ${p.title}${p.folder ? ` [${p.folder}]` : ""}`);
  if (view.resumePid) lines.push(`resume:      still running, handle ${view.resumePid}`);
  for (const e of view.errors) lines.push(`error:       ${e.code}: ${e.message}${e.hint ? ` (${e.hint})` : ""}`);
  if (view.hint) lines.push(`hint:        ${view.hint}`);
  return lines.join("\n") + "\n";
}

/** A line ending with exactly one newline (none added to empty text). */
export function line(textValue: string): string {
  return textValue.endsWith("\n") || textValue === "" ? textValue : `${textValue}\n`;
}
