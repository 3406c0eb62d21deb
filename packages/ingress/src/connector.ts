// How the gateway reaches a guest port: a connector opening byte streams (a VM's through
// GuestVm.connectTcp), with a deadline.
import type { Duplex } from "node:stream";

/**
 * Opens a raw byte stream to `127.0.0.1:port` inside the guest. `signal` cancels the attempt
 * only: once the promise resolves, the stream belongs to the caller (it is closed by destroying
 * it). The stream must behave like a socket: every byte the guest sent is readable, and `end` is
 * emitted, before `close`, even when the reader was paused as the guest closed. `GuestVm.connectTcp`
 * from `@pi-sandbox/vm` has this shape and keeps that promise.
 */
export type GuestConnector = (port: number, options: { signal?: AbortSignal }) => Promise<Duplex>;

/** Anything with `connectTcp`, such as a `GuestVm` from `@pi-sandbox/vm`. */
export interface TcpConnectable {
  /** Opens a stream to the guest's `127.0.0.1:port`. */
  connectTcp(port: number, options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<Duplex>;
}

/** The connector of a booted guest: previews reach guest ports through `vm.connectTcp`. */
export function guestVmConnector(vm: TcpConnectable): GuestConnector {
  return (port, options) => vm.connectTcp(port, { signal: options.signal });
}

/**
 * Runs `connector` with a deadline and a cancel signal. The timer and the signal only guard the
 * attempt: a stream that arrives after we gave up is destroyed, never leaked.
 */
export async function connectWithDeadline(
  connector: GuestConnector,
  port: number,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<Duplex> {
  signal.throwIfAborted();
  const attempt = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    attempt.abort(new Error(`no connection to guest port ${port} within ${timeoutMs} ms`));
  }, timeoutMs);
  const onAbort = () => attempt.abort(signal.reason);
  signal.addEventListener("abort", onAbort, { once: true });
  const guard = new Promise<never>((_, reject) => {
    attempt.signal.addEventListener("abort", () => reject(attempt.signal.reason), { once: true });
  });
  const pending = connector(port, { signal: attempt.signal });
  try {
    return await Promise.race([pending, guard]);
  } catch (error) {
    // The connector may still resolve after we stopped waiting; close what it returns.
    pending.then((stream) => stream.destroy()).catch(() => undefined);
    if (timedOut)
      throw Object.assign(new Error(`timed out after ${timeoutMs} ms`), { code: "ETIMEDOUT", cause: error });
    throw error;
  } finally {
    clearTimeout(timer);
    signal.removeEventListener("abort", onAbort);
  }
}
