// The host port a preview key listens on: the one leased to it, else a fresh one from the OS that
// no other key holds and the owner does not avoid, leased to it before the listener is handed out.
import { IngressError } from "./errors.js";
import type { PortLeaseStore } from "./lease-store.js";
import { PreviewListener, type PreviewListenerOptions } from "./preview-listener.js";

/** How many times a fresh OS-assigned port may collide with another key's lease before giving up. */
const leaseAttempts = 16;

/**
 * A listener for `key` on its leased host port, or on a new port leased to it. Throws
 * `INGRESS_LISTEN_FAILED` when no fresh port is free of other keys' leases and `avoidPorts`.
 */
export async function listenOnLease(
  key: string,
  leases: PortLeaseStore,
  avoidPorts: () => Promise<Iterable<number>>,
  options: PreviewListenerOptions,
  signal: AbortSignal,
): Promise<PreviewListener> {
  const leased = await leases.get(key);
  signal.throwIfAborted();
  if (leased !== undefined) return PreviewListener.listen(leased, options, signal);

  // A free port from the OS, but never one leased to another key: that key's listener may be
  // closed right now and expects its port back on reopen. Nor one the owner asks to avoid.
  const taken = new Set([...Object.values(await leases.entries()), ...(await avoidPorts())]);
  signal.throwIfAborted();
  for (let attempt = 0; attempt < leaseAttempts; attempt++) {
    const listener = await PreviewListener.listen(0, options, signal);
    if (taken.has(listener.hostPort)) {
      await listener.close();
      continue;
    }
    try {
      await leases.set(key, listener.hostPort);
    } catch (error) {
      await listener.close();
      throw error;
    }
    return listener;
  }
  throw new IngressError(
    "INGRESS_LISTEN_FAILED",
    `could not find a free host port for preview ${key} that is not leased to another preview or otherwise reserved`,
    { details: { key: key } },
  );
}
