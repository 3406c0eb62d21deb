// Progress lines of the CLI on stderr, and the byte progress bar of copies on a terminal.

import { escapeControlChars } from "@pi-sandbox/config";
import type { ProgressEvent } from "../wire.js";

const BAR_WIDTH = 24;

function mib(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** One bar: `[copy] [#######.........]  42%  8.4/20.0 MiB  dir/file`. */
export function renderBar(event: ProgressEvent & { done: number; total: number }, columns = 80): string {
  const ratio = event.total > 0 ? Math.min(1, event.done / event.total) : 1;
  const filled = Math.round(ratio * BAR_WIDTH);
  const head = `[${escapeControlChars(event.stage)}] [${"#".repeat(filled)}${".".repeat(BAR_WIDTH - filled)}] ${String(Math.round(ratio * 100)).padStart(3)}%  ${mib(event.done)}/${mib(event.total)}  `;
  const room = Math.max(0, columns - 1 - head.length);
  const label = escapeControlChars(event.message);
  if (label.length <= room) return head + label;
  return room < 2 ? head.trimEnd() : `${head}…${label.slice(label.length - room + 1)}`;
}

/**
 * Prints progress events on `stream`: JSON lines with `json`; on a terminal with the seconds since
 * the action began (`[12.3s boot] …`) and byte progress as one bar redrawn in place; otherwise
 * `[boot] …`, without byte progress. `end()` finishes a bar's line. `write` escapes control
 * characters; the bar's own carriage return and line erase go through `stream.write` (its text is
 * escaped here).
 */
export function progressPrinter(
  json: boolean,
  write: (text: string) => void,
  stream: { isTTY?: boolean; columns?: number; write(text: string): unknown },
): { print: (event: ProgressEvent) => void; end: () => void } {
  const started = Date.now();
  let barShown = false;
  const end = () => {
    if (barShown) stream.write("\n");
    barShown = false;
  };
  return {
    end,
    print: (event) => {
      if (json) {
        write(
          `${JSON.stringify({ progress: event.done === undefined ? { stage: event.stage, message: event.message } : event })}\n`,
        );
        return;
      }
      if (event.done !== undefined && event.total !== undefined) {
        if (!stream.isTTY) return;
        stream.write(`\r\x1b[2K${renderBar({ ...event, done: event.done, total: event.total }, stream.columns)}`);
        barShown = true;
        return;
      }
      end();
      const elapsed = stream.isTTY ? `${((Date.now() - started) / 1000).toFixed(1)}s ` : "";
      write(`[${elapsed}${escapeControlChars(event.stage)}] ${escapeControlChars(event.message)}\n`);
    },
  };
}
