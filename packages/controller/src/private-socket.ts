// A Unix socket only its owner can connect to: the daemons' and the waker's.
import { chmodSync } from "node:fs";
import type { Server } from "node:net";

/**
 * Listens on `socketPath`, the socket 0600 from its creation: bind() runs inside listen()
 * synchronously, so the umask covers it; the chmod covers a platform where it does not. Both happen
 * before the first connection is handled (connections are dispatched only after the callback). The
 * directory must already be private.
 */
export function listenPrivate(server: Server, socketPath: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    const umask = process.umask(0o177);
    try {
      server.listen(socketPath, () => {
        try {
          chmodSync(socketPath, 0o600);
          resolve();
        } catch (error) {
          server.close();
          reject(error as Error);
        }
      });
    } finally {
      process.umask(umask);
    }
  });
}
