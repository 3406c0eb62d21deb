// Following one log for the page: the controller log (a host file the `logs` action reads without
// a daemon) or a service's (read in the guest by the instance's daemon), through the same `logs`
// action with a cursor as `pi-sandbox logs -f`. Each line goes out with its control characters
// escaped; the page adds it as text.
import { escapeControlChars } from "@pi-sandbox/config";
import { errorJson, type CallFn } from "./snapshot.js";

/** How often a followed log is read again when nothing was waiting, in ms. */
export const LOG_POLL_MS = 500;

/** What a follower reports. */
export type LogEvent = { type: "lines"; lines: string[] } | { type: "failure"; error: ReturnType<typeof errorJson> };

/** A read of either log kind: the controller log's `lines`, or a service log's `text`. */
interface LogRead {
  lines?: string[] | number;
  text?: string;
  cursor?: string;
  more?: boolean;
}

function linesOf(read: LogRead): string[] {
  const lines = Array.isArray(read.lines) ? read.lines : (read.text ?? "").split("\n");
  if (!Array.isArray(read.lines) && lines.at(-1) === "") lines.pop();
  return lines.map((line) => escapeControlChars(line));
}

/**
 * Follows the log until `signal` aborts: the last lines first, then what is written next, each
 * batch to `emit`. A failed read (the instance stopped, say) is reported once and retried later.
 * While `readable()` is false nothing is read: a service log is read by the instance's daemon,
 * and asking it would wake an instance that suspended itself.
 */
export async function followLog(
  call: CallFn,
  target: { name: string; service?: string },
  emit: (event: LogEvent) => void,
  signal: AbortSignal,
  options: { pollMs?: number; readable?: () => boolean } = {},
): Promise<void> {
  const pollMs = options.pollMs ?? LOG_POLL_MS;
  const base = { action: "logs", name: target.name, ...(target.service ? { service: target.service } : {}) };
  let cursor: string | undefined;
  let failed = false;
  while (!signal.aborted) {
    if (options.readable && !options.readable()) {
      await sleep(pollMs, signal);
      continue;
    }
    let more = false;
    try {
      const read = (await call(cursor === undefined ? { ...base, follow: true } : { ...base, cursor })) as LogRead;
      const lines = linesOf(read);
      if (lines.length > 0) emit({ type: "lines", lines });
      cursor = read.cursor ?? cursor;
      more = read.more === true;
      failed = false;
    } catch (error) {
      if (!failed) emit({ type: "failure", error: errorJson(error) });
      failed = true;
    }
    if (!more) await sleep(failed ? pollMs * 4 : pollMs, signal);
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
