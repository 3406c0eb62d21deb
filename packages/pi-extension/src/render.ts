// Compact TUI rendering: one line for the call, a few for the result, the full text when expanded.
// Everything shown may come from the guest or the model (titles, messages, output, the call's own
// input), so each piece is escaped before the theme colours it: a terminal sequence in it shows as
// `\x1b…` instead of acting. The theme's own colour codes are added after escaping.

import type { Theme, ToolRenderResultOptions } from "@earendil-works/pi-coding-agent";
import { Text } from "@earendil-works/pi-tui";
import { escapeControlChars } from "@pi-sandbox/controller/client";
import type { SandboxToolDetails, SandboxToolResult } from "./format.js";
import { peekAction } from "./input.js";

/** Most lines of the model-facing text shown in the expanded view. */
const EXPANDED_LINES = 40;

/** One line: line breaks and every other control character escaped. */
const oneLine = (value: string) => escapeControlChars(value);
/** Text that may span lines (error messages, hints): controls escaped, line breaks and tabs kept. */
const multiLine = (value: string) => escapeControlChars(value, { multiline: true });

/** The call line: `sandbox create demo`. */
export function renderSandboxCall(args: { input?: unknown } | undefined, theme: Theme): Text {
  const peek = peekAction(args?.input ?? "");
  let line = theme.fg("toolTitle", theme.bold("sandbox ")) + theme.fg("accent", oneLine(peek.action));
  if (peek.name !== undefined) line += " " + theme.fg("text", oneLine(peek.name));
  return new Text(line, 0, 0);
}

function previewLines(details: SandboxToolDetails, theme: Theme): string[] {
  return (details.previews ?? []).map(
    (p) =>
      `  ${theme.fg("muted", oneLine(p.service))} ${theme.fg("accent", oneLine(p.url))}${p.title ? theme.fg("dim", `  ${oneLine(p.title)}`) : ""}`,
  );
}

function bodyLines(result: SandboxToolResult, theme: Theme): string[] {
  const all = result.content.flatMap((c) => (c.type === "text" ? c.text.split(/\r?\n/).map(multiLine) : []));
  const shown = all.slice(0, EXPANDED_LINES).map((l) => theme.fg("dim", `  ${l}`));
  if (all.length > EXPANDED_LINES) shown.push(theme.fg("dim", `  … ${all.length - EXPANDED_LINES} more lines`));
  return shown;
}

/** The result: state, summary and preview links; progress while running; code and hint on errors. */
export function renderSandboxResult(result: SandboxToolResult, options: ToolRenderResultOptions, theme: Theme): Text {
  const details = result.details as SandboxToolDetails | undefined;
  const out: string[] = [];
  if (!details) {
    // Results Pi made itself (e.g. a call aborted before it started) carry no details.
    out.push(theme.fg(result.isError ? "error" : "muted", bodyLines(result, theme).join("\n").trim()));
    return new Text(out.join("\n"), 0, 0);
  }
  const progress = details.progress ?? [];
  if (details.status === "running" || options.isPartial) {
    const shown = options.expanded ? progress : progress.slice(-1);
    for (const e of shown) out.push(theme.fg("muted", `… [${oneLine(e.stage)}] ${oneLine(e.message)}`));
    if (out.length === 0) out.push(theme.fg("muted", "… working"));
  } else if (details.status === "detached") {
    out.push(theme.fg("warning", "stopped waiting; the work continues"));
    if (details.error?.hint) out.push(theme.fg("dim", `  ${multiLine(details.error.hint)}`));
  } else if (details.status === "error") {
    const error = details.error;
    out.push(theme.fg("error", `✗ ${oneLine(error?.code ?? "error")}: ${multiLine(error?.message ?? "")}`));
    if (error?.hint) out.push(theme.fg("dim", `  ${multiLine(error.hint)}`));
  } else {
    const parts = [details.name, details.state, details.summary].filter((p): p is string => Boolean(p)).map(oneLine);
    out.push(theme.fg("success", "✓ ") + (parts.length > 0 ? parts.join(" · ") : oneLine(details.action)));
    out.push(...previewLines(details, theme));
    if (options.expanded) out.push(...bodyLines(result, theme));
  }
  return new Text(out.join("\n"), 0, 0);
}
