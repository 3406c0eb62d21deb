// Timing marks for finding where a command's time goes: with PI_SANDBOX_TRACE=<file>, the CLI
// and the daemons it starts (they inherit the environment) append one line per mark to that file.
// Off (the variable unset), a mark costs one environment read.
import { appendFileSync } from "node:fs";

/** One line of a trace file: `<ms since the epoch, 0.1 ms> <pid> <what>`. */
export function traceLine(atMs: number, pid: number, what: string): string {
  return `${atMs.toFixed(1)} ${pid} ${what.replace(/[\r\n]+/g, " ")}\n`;
}

/**
 * Appends a mark to `$PI_SANDBOX_TRACE` when it is set; `atMs` (ms since the epoch) defaults to
 * now. Never throws: a trace never fails the work it watches.
 */
export function traceMark(what: string, atMs?: number, env: NodeJS.ProcessEnv = process.env): void {
  const file = env.PI_SANDBOX_TRACE;
  if (!file) return;
  try {
    appendFileSync(file, traceLine(atMs ?? performance.timeOrigin + performance.now(), process.pid, what));
  } catch {
    // Only the mark is lost.
  }
}

/** Marks this process's own start (Node's time origin) and `what` now: the cost of Node and the modules. */
export function traceProcessStart(who: string, env: NodeJS.ProcessEnv = process.env): void {
  if (!env.PI_SANDBOX_TRACE) return;
  traceMark(`${who}: process started`, performance.timeOrigin, env);
  traceMark(`${who}: modules loaded`, undefined, env);
}
