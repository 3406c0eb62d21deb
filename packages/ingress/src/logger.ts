/** Where the gateway reports what it did; it never prints by itself. */
export interface IngressLogger {
  /** Lifecycle facts: a preview opened or closed. */
  info(message: string): void;
  /** Failures a preview client saw (502s, cut streams, refused Host headers). */
  warn(message: string): void;
}

/** A logger that drops everything. */
export const silentLogger: IngressLogger = { info: () => undefined, warn: () => undefined };
