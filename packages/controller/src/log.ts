// The controller log: `time [prefix] message` lines in a size-bounded file, rotated once.
import { execFile } from "node:child_process";
import { appendFileSync, renameSync, statSync } from "node:fs";
import { escapeControlChars } from "@pi-sandbox/config";

/** Where the controller log rotates: one previous file is kept as `<file>.1`. */
export const LOG_ROTATE_BYTES = 2 * 1024 * 1024;

/** A small logger writing `time [prefix] message` lines to a size-bounded file. */
export interface DaemonLogger {
  info(message: string): void;
  warn(message: string): void;
  /** A logger whose lines carry an extra identity prefix, e.g. `[svc web]`. */
  child(prefix: string): DaemonLogger;
}

/**
 * Creates the daemon's rotating file logger. Writes are synchronous so nothing is lost on a crash.
 * Every entry is exactly one line: messages carry guest text (agent errors, service names, config
 * messages), so line breaks and every other control character in them are escaped (`\n`, `\x1b`);
 * a guest can neither forge an entry nor leave escape sequences for whoever reads the file.
 */
export function createFileLogger(file: string, prefix: string): DaemonLogger {
  let written = 0;
  try {
    written = statSync(file).size;
  } catch {
    written = 0;
  }
  const write = (level: string, fullPrefix: string, message: string) => {
    const line = `${new Date().toISOString()} ${level} ${escapeControlChars(`${fullPrefix} ${message}`)}\n`;
    if (written + line.length > LOG_ROTATE_BYTES) {
      try {
        renameSync(file, `${file}.1`);
      } catch {
        // Nothing to rotate yet.
      }
      written = 0;
    }
    try {
      appendFileSync(file, line, { mode: 0o600 });
    } catch {
      // A log line never fails the work it reports (e.g. on a full disk, which is itself reported).
      return;
    }
    written += Buffer.byteLength(line);
  };
  const make = (fullPrefix: string): DaemonLogger => ({
    info: (m) => write("info", fullPrefix, m),
    warn: (m) => write("warn", fullPrefix, m),
    child: (p) => make(`${fullPrefix} ${p}`),
  });
  return make(prefix);
}

/**
 * Writes one line to the host's system log (`logger -t pi-sandbox`: the journal or syslog), for
 * what must be said where no file of the state directory is left to hold it. Resolves false when
 * the host has no `logger` or it failed; never rejects.
 */
export function systemLog(message: string): Promise<boolean> {
  return new Promise((resolve) => {
    execFile("logger", ["-t", "pi-sandbox", "--", escapeControlChars(message)], { timeout: 5_000 }, (error) =>
      resolve(error === null),
    );
  });
}
