// Test seam: a connector to host loopback ports standing in for a guest.
import { connect } from "node:net";
import { duplexPair, type Duplex } from "node:stream";
import type { GuestConnector } from "./connector.js";

/** Options of {@link loopbackConnector}. */
export interface LoopbackConnectorOptions {
  /** Host address standing in for the guest's 127.0.0.1. Default `127.0.0.1`. */
  host?: string;
  /**
   * Hand out a plain `Duplex` joined to the TCP socket instead of the socket itself, like a VM's
   * virtio stream: proves nothing depends on `net.Socket` extras. Default false.
   */
  plainDuplex?: boolean;
}

/**
 * A connector whose "guest" is this host: `port` is a host TCP port. For tests and benchmarks of
 * code that takes a {@link GuestConnector}.
 */
export function loopbackConnector(options: LoopbackConnectorOptions = {}): GuestConnector {
  const host = options.host ?? "127.0.0.1";
  return (port, { signal }) =>
    new Promise<Duplex>((resolve, reject) => {
      signal?.throwIfAborted();
      const socket = connect({ host, port, noDelay: true });
      const onAbort = () => socket.destroy(signal?.reason as Error);
      signal?.addEventListener("abort", onAbort, { once: true });
      socket.once("error", (error) => {
        signal?.removeEventListener("abort", onAbort);
        reject(error);
      });
      socket.once("connect", () => {
        // The signal guards the attempt only; afterwards the stream is the caller's.
        signal?.removeEventListener("abort", onAbort);
        socket.removeAllListeners("error");
        if (!options.plainDuplex) {
          resolve(socket);
          return;
        }
        const [inner, outer] = duplexPair();
        socket.pipe(inner).pipe(socket);
        const cut = () => {
          inner.destroy();
          socket.destroy();
        };
        socket.on("error", cut).on("close", cut);
        inner.on("error", cut).on("close", cut);
        outer.on("close", cut);
        resolve(outer);
      });
    });
}
