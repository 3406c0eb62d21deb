import type { EntryView } from "../state/inspect.js";

function table(rows: string[][]): string {
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

function formatView(view: EntryView): string {
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

/** Human-readable rendering of an action's result; falls back to JSON for anything unusual. */
export function formatResult(action: string, result: unknown): string {
  const r = result as Record<string, unknown>;
  if (action === "list") {
    const views = (r.instances ?? r.templates ?? []) as EntryView[];
    if (views.length === 0) return `no ${r.templates ? "templates" : "instances"}\n`;
    return table([
      ["NAME", "STATE", "CPUS", "MEMORY", "DISK", "PREVIEW"],
      ...views.map((v) => [
        v.name,
        v.state,
        String(v.resources.cpus),
        `${v.resources.memoryGiB} GiB`,
        `${v.diskGiB} GiB`,
        v.previews[0]?.url ?? "",
      ]),
    ]);
  }
  if (
    ["inspect", "create", "start", "stop", "prepare"].includes(action) &&
    r &&
    typeof r.state === "string" &&
    r.resources
  ) {
    return formatView(r as unknown as EntryView);
  }
  if (action === "logs" && Array.isArray(r.lines)) return (r.lines as string[]).join("\n") + "\n";
  if (action === "logs" && typeof r.text === "string")
    return r.text.endsWith("\n") || r.text === "" ? r.text : `${r.text}\n`;
  if (action === "read" && typeof r.content === "string") return r.content + (r.truncated ? "\n[truncated]\n" : "");
  if (action === "shell" && typeof r.command === "string") return `${r.command}\n`;
  if (action === "exec" || action === "exec-status") {
    const output = String(r.output ?? "");
    if (r.running) return `${output}[still running; follow with: pi-sandbox exec-status <name> ${String(r.pid)}]\n`;
    return `${output}${r.exitCode !== 0 ? `[exit ${String(r.exitCode)}]\n` : ""}`;
  }
  if (action === "doctor" && Array.isArray(r.checks)) {
    return (
      (r.checks as { name: string; status: string; detail: string; fix?: string }[])
        .map(
          (c) =>
            `${c.status.padEnd(4)}  ${c.name}: ${c.detail}${c.fix && c.status !== "ok" ? `\n      fix: ${c.fix}` : ""}`,
        )
        .join("\n") + "\n"
    );
  }
  if (action === "help" && typeof r.help === "string") return r.help + "\n";
  if (action === "destroy" && typeof r.destroyed === "string") {
    return `destroyed ${r.kind === "templates" ? "template" : "instance"} ${r.destroyed}\n`;
  }
  return JSON.stringify(result, null, 2) + "\n";
}
