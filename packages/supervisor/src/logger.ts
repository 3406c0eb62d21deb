/** Where the supervisor client reports what it noticed; it never prints by itself. */
export interface SupervisorLogger {
  /** Lifecycle facts: agent installed, channel opened or closed. */
  info(message: string): void;
  /** Problems that did not fail a call: agent stderr, stray output, listener errors. */
  warn(message: string): void;
}

/** A logger that drops everything. */
export const silentLogger: SupervisorLogger = { info: () => undefined, warn: () => undefined };
