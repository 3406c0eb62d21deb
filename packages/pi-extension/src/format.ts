// Turns controller results, errors, progress and interruptions into Pi tool results: compact
// text for the model, `details` for the renderer, `structuredContent` for code-mode scripts.
//
// Results carry guest text (titles, agent messages, command output) that a prompt-injected model
// in the guest may have filled with terminal escape sequences, and Pi's TUI and print mode show
// the model's copy. So the text content never holds a raw control character: JSON keeps them as
// JSON escapes (`\u001b`, `\u009b`, the same value for the model), plain text escapes them visibly
// (`\x1b`), keeping line breaks and tabs. `details` is escaped by the renderer; structuredContent
// is data for scripts and stays exact.

import { DEFAULT_MAX_BYTES, formatSize, truncateHead, truncateTail } from "@earendil-works/pi-coding-agent";
import type { AgentToolResult } from "@earendil-works/pi-coding-agent";
import {
  escapeControlChars,
  findAction,
  isCodedError,
  type PreviewLinkInfo,
  type ProgressEvent,
} from "@pi-sandbox/controller/client";
import type { ActionPeek } from "./input.js";

/** Most progress events kept in `details` while a long action runs. */
export const PROGRESS_KEPT = 6;

/** What the renderer needs about one call; stays small because the session keeps it. */
export interface SandboxToolDetails {
  /** Action name as read from the input (`?` when unreadable). */
  action: string;
  /** Instance or template name, when the input gave one. */
  name?: string;
  /** `running` while streaming, `ok`, `error`, or `detached` when the user ended the wait. */
  status: "running" | "ok" | "error" | "detached";
  /** Entry state reported by the result (`running`, `stopped`, …). */
  state?: string;
  /** Preview links reported by the result. */
  previews?: PreviewLinkInfo[];
  /** One-line summary of the result, e.g. `exit 0` or `2 instances`. */
  summary?: string;
  /** The last few progress events. */
  progress?: ProgressEvent[];
  /** The error's wire form, for error results. */
  error?: { code: string; message: string; hint?: string };
}

/** A tool result of this package. */
export type SandboxToolResult = AgentToolResult<SandboxToolDetails>;

function base(peek: ActionPeek, status: SandboxToolDetails["status"]): SandboxToolDetails {
  const details: SandboxToolDetails = { action: peek.action, status };
  if (peek.name !== undefined) details.name = peek.name;
  return details;
}

/** Content for the model (and Pi's TUI): control characters escaped, line breaks and tabs kept. */
function text(value: string): SandboxToolResult["content"] {
  return [{ type: "text", text: escapeControlChars(value, { multiline: true }) }];
}

/** Compact JSON with no raw control character: DEL and C1, which JSON.stringify leaves, as `\u00XX`. */
function safeJson(value: unknown): string {
  return escapeControlChars(JSON.stringify(value));
}

/** One line of text from the guest or the model: line breaks included, every control escaped. */
const oneLine = (value: string) => escapeControlChars(value);

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function summarize(action: string, result: Record<string, unknown>): string | undefined {
  try {
    return findAction(action)?.brief?.(result);
  } catch {
    return undefined; // a result of an unexpected shape has no summary
  }
}

/** Result fields carrying guest text, the end of each that matters most, and how to see the rest. */
const BULKY_FIELDS = [
  {
    key: "output",
    keep: "last",
    more: "redirect the command's output to a guest file and read it in parts (e.g. `cmd > /tmp/out 2>&1`, then `sed -n 1,400p /tmp/out`)",
  },
  { key: "content", keep: "first", more: "read the rest with exec (e.g. `tail -c +40001 <path> | head -c 40000`)" },
  { key: "lines", keep: "last", more: "ask for fewer lines" },
] as const;

const bytes = (value: string) => Buffer.byteLength(value, "utf8");

/**
 * The model's copy of a result, within Pi's tool-output budget (DEFAULT_MAX_BYTES). When the JSON
 * is too big, the largest guest-text field is cut (output keeps its end, file content its start,
 * log lines the newest) and a `truncated` note says what was cut and how to see the rest.
 * Code-mode scripts still receive the whole result as structuredContent.
 */
function modelBody(record: Record<string, unknown>): string {
  const whole = safeJson(record);
  if (bytes(whole) <= DEFAULT_MAX_BYTES) return whole;
  const field = BULKY_FIELDS.filter((f) => record[f.key] !== undefined)
    .map((f) => ({ ...f, size: bytes(safeJson(record[f.key])) }))
    .sort((a, b) => b.size - a.size)[0];
  if (!field) return truncateHead(whole, { maxBytes: DEFAULT_MAX_BYTES }).content;
  const value = record[field.key];
  const original = Array.isArray(value) ? (value as unknown[]).map(String).join("\n") : String(value);
  // JSON escaping makes the cut text grow; shrink the budget until the whole body fits.
  let budget = DEFAULT_MAX_BYTES - (bytes(whole) - field.size) - 512;
  for (;;) {
    const cut =
      field.keep === "first"
        ? truncateHead(original, { maxBytes: budget })
        : truncateTail(original, { maxBytes: budget });
    // A first line longer than the budget (minified code) comes back empty from truncateHead.
    if (cut.firstLineExceedsLimit) {
      cut.content = Buffer.from(original).subarray(0, budget).toString("utf8");
      cut.outputBytes = bytes(cut.content);
    }
    // Line-based cutting drops a final newline; keep the text's own ending.
    const tail = original.endsWith("\n") && !cut.content.endsWith("\n") ? `${cut.content}\n` : cut.content;
    const kept = Array.isArray(value) ? (cut.content === "" ? [] : cut.content.split("\n")) : tail;
    const body = safeJson({
      ...record,
      [field.key]: kept,
      truncated: `${field.key} cut to its ${field.keep} ${formatSize(cut.outputBytes)} of ${formatSize(cut.totalBytes)} to fit the tool-output limit; to see the rest, ${field.more}`,
    });
    if (bytes(body) <= DEFAULT_MAX_BYTES || budget <= 1024) return body;
    budget -= bytes(body) - DEFAULT_MAX_BYTES + 256;
  }
}

/** A successful action: help as plain text, every other result as compact JSON within Pi's budget. */
export function successResult(peek: ActionPeek, result: unknown): SandboxToolResult {
  const details = base(peek, "ok");
  const record = isRecord(result) ? result : { result };
  if (typeof record.state === "string") details.state = record.state;
  if (Array.isArray(record.previews)) details.previews = record.previews as PreviewLinkInfo[];
  const summary = summarize(peek.action, record);
  if (summary !== undefined) details.summary = summary;
  const body =
    peek.action === "help" && typeof record.help === "string"
      ? record.help
      : isRecord(result)
        ? modelBody(record)
        : safeJson(result);
  return { content: text(body), details, structuredContent: record as SandboxToolResult["structuredContent"] };
}

/** The wire form of any failure the client reported (a ControllerError, a SandboxExtensionError, ...). */
export function errorJson(error: unknown): { code: string; message: string; hint?: string } {
  if (isCodedError(error)) {
    const json: { code: string; message: string; hint?: string } = { code: error.code, message: error.message };
    if (error.hint) json.hint = error.hint;
    return json;
  }
  return {
    code: "PI_SANDBOX_UNEXPECTED",
    message: error instanceof Error ? error.message : String(error),
    hint: 'This is a bug in pi-sandbox; {"action":"doctor"} checks the host, and the controller log has details.',
  };
}

/**
 * A failed action as a tool error. No `structuredContent`, so code-mode scripts see the call
 * reject with this text.
 */
export function errorResult(peek: ActionPeek, error: unknown): SandboxToolResult {
  const json = errorJson(error);
  const details = base(peek, "error");
  details.error = json;
  const body = `${oneLine(json.code)}: ${json.message}${json.hint ? `\nHint: ${json.hint}` : ""}`;
  return { content: text(body), details, isError: true };
}

/** A partial result while a long action runs; only the UI sees it. */
export function progressResult(peek: ActionPeek, events: readonly ProgressEvent[]): SandboxToolResult {
  const details = base(peek, "running");
  details.progress = events.slice(-PROGRESS_KEPT);
  const last = events.at(-1);
  return {
    content: text(last ? `[${oneLine(last.stage)}] ${oneLine(last.message)}` : `${oneLine(peek.action)} …`),
    details,
  };
}

function quote(value: Record<string, unknown>): string {
  return safeJson(value);
}

/** How to follow work the user stopped waiting for. */
export function followUpHint(peek: ActionPeek): string {
  if (peek.name === undefined) return "Nothing runs in the background for this action; send it again when needed.";
  const name = peek.name;
  const kind = peek.action === "prepare" || peek.kind === "templates" ? { kind: "templates" } : {};
  const inspect = quote({ action: "inspect", name, ...kind });
  switch (peek.action) {
    case "exec":
      return `A command that had started keeps running in the guest. Check the instance with ${inspect}; find or stop the command with exec (ps, pkill -f <pattern>).`;
    case "exec-status":
      return `The command keeps running in the guest; follow it with ${quote({ action: "exec-status", name, pid: peek.pid ?? "<pid>" })}.`;
    case "help":
    case "list":
    case "inspect":
    case "logs":
    case "doctor":
      return "Nothing runs in the background for this action; send it again when needed.";
    default:
      return `Whatever the controller already received continues. Follow it with ${inspect} (state, errors) and ${quote({ action: "logs", name })} (controller log) before repeating the call.`;
  }
}

/**
 * The user ended the wait (Esc): the client's signal only ends the wait, so the controller and
 * the guest carry on. Reported as an error so the model does not take it as done.
 */
export function detachedResult(peek: ActionPeek, events: readonly ProgressEvent[]): SandboxToolResult {
  const details = base(peek, "detached");
  if (events.length > 0) details.progress = events.slice(-PROGRESS_KEPT);
  const what = peek.name === undefined ? oneLine(peek.action) : `${oneLine(peek.action)} of ${oneLine(peek.name)}`;
  const message = `Stopped waiting for ${what} because the user interrupted.`;
  const hint = followUpHint(peek);
  details.error = { code: "PI_SANDBOX_WAIT_ENDED", message, hint };
  const last = events.at(-1);
  const lastLine = last ? `\nLast progress: [${oneLine(last.stage)}] ${oneLine(last.message)}` : "";
  return { content: text(`${message} ${hint}${lastLine}`), details, isError: true };
}
