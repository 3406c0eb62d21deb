// Following a service log: the tail and a cursor, then what was written after the cursor. The
// guest side is `agent/pi_sandbox_agent/log_follow.py`; nothing it returns is trusted beyond what
// the checks below allow.

import { LIMITS } from "@pi-sandbox/config";
import type { AgentChannel } from "./channel.js";
import { SupervisorError } from "./errors.js";
import { type CallOptions, REPLY_MARGIN_MS } from "./options.js";
import { BadReply, boolean, capText, integer, record, text } from "./reply-checks.js";

/** `<inode>:<offset>`, as the agent makes them. */
const CURSOR = /^[0-9]{1,20}:[0-9]{1,20}$/;

/** One read of a followed service log. */
export interface LogFollowed {
  /** Service name. */
  service: string;
  /** The tail (first read) or what was written after the cursor; at most 64 KiB. */
  text: string;
  /** Bytes left out to stay under 64 KiB (the first read's tail only). */
  truncatedBytes: number;
  /** Pass back as `cursor` to get what is written next. */
  cursor: string;
  /** More is already waiting after `cursor`: read again at once. */
  more: boolean;
  /** Guest path of the current log file. */
  logPath: string;
}

function parseFollowed(raw: unknown, service: string): LogFollowed {
  const r = record(raw, "result");
  if (text(r.service, "result.service", 64) !== service)
    throw new BadReply("result.service", "is not the service asked about");
  if (typeof r.text !== "string") throw new BadReply("result.text", "is not a string");
  const cursor = text(r.cursor, "result.cursor", 41);
  if (!CURSOR.test(cursor)) throw new BadReply("result.cursor", "is not a log cursor");
  const capped = capText(r.text, LIMITS.outputMaxBytes, "tail", "log");
  return {
    service,
    text: capped.text,
    truncatedBytes: integer(r.truncatedBytes, "result.truncatedBytes") + capped.omittedBytes,
    cursor,
    more: boolean(r.more, "result.more"),
    logPath: text(r.logPath, "result.logPath"),
  };
}

/**
 * Without `cursor`: the last `lines` lines of a service log and a cursor at their end. With one:
 * only what was written after it (at most 64 KiB; `more` when more is waiting), across the log's
 * rotations and the service's restarts.
 */
export async function followLogThroughAgent(
  channel: AgentChannel,
  service: string,
  options: CallOptions & { cursor?: string; lines?: number },
): Promise<LogFollowed> {
  const { cursor, lines } = options;
  if (cursor !== undefined && !CURSOR.test(cursor)) {
    throw new SupervisorError("INVALID_ARGUMENT", "cursor must be the cursor of an earlier read of this log", {
      details: { key: "cursor" },
    });
  }
  if (lines !== undefined && (!Number.isInteger(lines) || lines < 1 || lines > LIMITS.logLinesMax)) {
    throw new SupervisorError("INVALID_ARGUMENT", `lines must be an integer from 1 to ${LIMITS.logLinesMax}`, {
      details: { key: "lines", value: lines },
    });
  }
  const args = cursor !== undefined ? { service, cursor } : { service, lines: lines ?? LIMITS.logLinesDefault };
  return channel.request("logs-follow", args, (raw) => parseFollowed(raw, service), {
    signal: options.signal,
    timeoutMs: REPLY_MARGIN_MS,
  });
}

/** One read of the setup run's log. */
export interface SetupFollowed {
  /** Whether a setup run is in progress. */
  running: boolean;
  /** What the run wrote after the cursor (from its start without one); at most 64 KiB. */
  text: string;
  /** Pass back as `cursor` to get what is written next. */
  cursor: string;
  /** More is already waiting after `cursor`: read again at once. */
  more: boolean;
}

function parseSetupFollowed(raw: unknown): SetupFollowed {
  const r = record(raw, "result");
  if (r.kind !== "setup") throw new BadReply("result.kind", "is not setup");
  if (typeof r.text !== "string") throw new BadReply("result.text", "is not a string");
  const cursor = text(r.cursor, "result.cursor", 41);
  if (!CURSOR.test(cursor)) throw new BadReply("result.cursor", "is not a log cursor");
  return {
    running: boolean(r.running, "result.running"),
    text: capText(r.text, LIMITS.outputMaxBytes, "head", "log").text,
    cursor,
    more: boolean(r.more, "result.more"),
  };
}

/**
 * What the setup run in progress (or the last one) wrote after `cursor`: from its start without
 * one. Lets a caller show setup's commands and output while `runSetup` waits.
 */
export async function followSetupThroughAgent(
  channel: AgentChannel,
  options: CallOptions & { cursor?: string },
): Promise<SetupFollowed> {
  const cursor = options.cursor ?? "0:0";
  if (!CURSOR.test(cursor)) {
    throw new SupervisorError("INVALID_ARGUMENT", "cursor must be the cursor of an earlier read of the setup log", {
      details: { key: "cursor" },
    });
  }
  return channel.request("run-follow", { kind: "setup", cursor }, parseSetupFollowed, {
    signal: options.signal,
    timeoutMs: REPLY_MARGIN_MS,
  });
}
