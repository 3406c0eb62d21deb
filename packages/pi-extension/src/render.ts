// Compact TUI rendering: one line for the call, a few for the result, the full text when expanded.

import type { Theme, ToolRenderResultOptions } from "@earendil-works/pi-coding-agent";
import { Text } from "@earendil-works/pi-tui";
import type { SandboxToolDetails, SandboxToolResult } from "./format.js";
import { peekAction } from "./input.js";

/** Most lines of the model-facing text shown in the expanded view. */
const EXPANDED_LINES = 40;

/** The call line: `sandbox create demo`. */
export function renderSandboxCall(args: { input?: unknown } | undefined, theme: Theme): Text {
  const peek = peekAction(args?.input ?? "");
  let line = theme.fg("toolTitle", theme.bold("sandbox ")) + theme.fg("accent", peek.action);
  if (peek.name !== undefined) line += " " + theme.fg("text", peek.name);
  return new Text(line, 0, 0);
}

function previewLines(details: SandboxToolDetails, theme: Theme): string[] {
  return (details.previews ?? []).map(
    (p) =>
      `  ${theme.fg("muted", p.service)} ${theme.fg("accent", p.url)}${p.title ? theme.fg("dim", `  ${p.title}`) : ""}`,
  );
}

function bodyLines(result: SandboxToolResult, theme: Theme): string[] {
  const all = result.content.flatMap((c) => (c.type === "text" ? c.text.split("\n") : []));
  const shown = all.slice(0, EXPANDED_LINES).map((l) => theme.fg("dim", `  ${l}`));
  if (all.length > EXPANDED_LINES) shown.push(theme.fg("dim", `  … ${all.length - EXPANDED_LINES} more lines`));
  return shown;
}

/** The result: state, summary and preview links; progress while running; code and hint on errors. */
export function renderSandboxResult(result: SandboxToolResult, options: ToolRenderResultOptions, theme: Theme): Text {
  const details = result.details as SandboxToolDetails | undefined;
  const lines: string[] = [];
  if (!details) {
    // Results Pi made itself (e.g. a call aborted before it started) carry no details.
    lines.push(theme.fg(result.isError ? "error" : "muted", bodyLines(result, theme).join("\n").trim()));
    return new Text(lines.join("\n"), 0, 0);
  }
  const progress = details.progress ?? [];
  if (details.status === "running" || options.isPartial) {
    const shown = options.expanded ? progress : progress.slice(-1);
    for (const e of shown) lines.push(theme.fg("muted", `… [${e.stage}] ${e.message}`));
    if (lines.length === 0) lines.push(theme.fg("muted", "… working"));
  } else if (details.status === "detached") {
    lines.push(theme.fg("warning", "stopped waiting; the work continues"));
    if (details.error?.hint) lines.push(theme.fg("dim", `  ${details.error.hint}`));
  } else if (details.status === "error") {
    const error = details.error;
    lines.push(theme.fg("error", `✗ ${error?.code ?? "error"}: ${error?.message ?? ""}`));
    if (error?.hint) lines.push(theme.fg("dim", `  ${error.hint}`));
  } else {
    const parts = [details.name, details.state, details.summary].filter((p): p is string => Boolean(p));
    lines.push(theme.fg("success", "✓ ") + (parts.length > 0 ? parts.join(" · ") : details.action));
    lines.push(...previewLines(details, theme));
    if (options.expanded) lines.push(...bodyLines(result, theme));
  }
  return new Text(lines.join("\n"), 0, 0);
}
