// Argument checks and result shaping shared by the client's calls.
import { LIMITS } from "@pi-sandbox/config";
import { SupervisorError } from "./errors.js";
import type { CheckedExec } from "./replies.js";
import type { ExecResult } from "./types.js";

/** The public result of a checked exec reply. */
export function toExecResult(raw: CheckedExec): ExecResult {
  return {
    handle: raw.handle,
    running: raw.running,
    ...(raw.exitCode === undefined ? {} : { exitCode: raw.exitCode }),
    ...(raw.signal === undefined ? {} : { signal: raw.signal }),
    output: raw.output ?? "",
    truncatedBytes: raw.truncatedBytes ?? 0,
    ...(raw.stderr === undefined ? {} : { stderr: raw.stderr, stderrTruncatedBytes: raw.stderrTruncatedBytes ?? 0 }),
    ...(raw.durationMs === undefined ? {} : { durationMs: raw.durationMs }),
  };
}

/** A wait in ms: an integer from 0 to `max` (default the exec wait maximum). */
export function checkWait(value: number | undefined, key: string, max: number = LIMITS.execWaitMaxMs): number {
  const wait = value ?? LIMITS.execWaitDefaultMs;
  if (!Number.isInteger(wait) || wait < 0 || wait > max) {
    throw new SupervisorError("INVALID_ARGUMENT", `${key} must be an integer from 0 to ${max} ms, got ${value}`, {
      details: { key, value },
    });
  }
  return wait;
}

/** Guest paths must be absolute. */
export function checkAbsolute(path: string): void {
  if (typeof path !== "string" || !path.startsWith("/")) {
    throw new SupervisorError("INVALID_ARGUMENT", `guest paths must be absolute, got ${JSON.stringify(path)}`, {
      details: { key: "path", value: path },
    });
  }
}

/** Whether an exec-status result is of a setup run (its output keeps the tail, as the agent's does). */
export function isSetupHandle(result: unknown): boolean {
  return typeof result === "object" && result !== null && (result as Record<string, unknown>).kind === "setup";
}

/** At most `maxBytes` of `data`, never splitting a UTF-8 character. */
export function cutUtf8(data: Buffer, maxBytes: number): Buffer {
  let end = Math.min(maxBytes, data.length);
  // Step back over continuation bytes so the cut never splits a character.
  while (end > 0 && end < data.length && (data[end]! & 0xc0) === 0x80) end--;
  return data.subarray(0, end);
}
