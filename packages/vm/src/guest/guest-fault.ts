// A running guest's sticky fault (QEMU paused it: the host disk is full): operations in flight and
// new ones reject with it instead of waiting for a guest that will not answer.
import type { VmError } from "../errors.js";

/**
 * A failure of a running guest that no guest operation can outwait (QEMU paused the guest because
 * the host disk is full): once raised, every operation in flight rejects with it, and new ones
 * reject at once, instead of waiting for a guest that will not answer. Sticky until cleared.
 */
export class GuestFault {
  private error: VmError | undefined;
  private readonly waiters = new Set<(error: VmError) => void>();

  /** The raised fault, if any. */
  get current(): VmError | undefined {
    return this.error;
  }

  /** Raises `error` unless a fault is already raised; returns whether this call raised it. */
  raise(error: VmError): boolean {
    if (this.error) return false;
    this.error = error;
    for (const reject of [...this.waiters]) reject(error);
    this.waiters.clear();
    return true;
  }

  /** Calls `listener` with the fault when one is raised (at once if one is); returns its removal. */
  onRaise(listener: (error: VmError) => void): () => void {
    if (this.error) {
      listener(this.error);
      return () => undefined;
    }
    this.waiters.add(listener);
    return () => this.waiters.delete(listener);
  }

  /** Forgets the fault (the cause went away, e.g. the guest was resumed). */
  clear(): void {
    this.error = undefined;
  }

  /** `work`, or a rejection with the fault if one is raised before `work` settles. */
  race<T>(work: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const off = this.onRaise(reject);
      work.then(resolve, reject).finally(off);
    });
  }
}
