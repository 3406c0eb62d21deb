// A new channel to the guest agent after the last one closed under a running VM, a few times at
// most: the agent outlives its channel, so its services and exec handles carry on untouched.
import type { Lifecycle } from "./lifecycle.js";
import type { InstanceState } from "./state.js";

/** A closed agent channel is reattached at most this often in {@link REATTACH_WINDOW_MS}; then the instance fails. */
const REATTACH_LIMIT = 3;
const REATTACH_WINDOW_MS = 10 * 60_000;

/** The reattaches of one instance's agent channel, counted in a sliding window. */
export class AgentReattach {
  /** When the agent's channel was last reattached. */
  #at: number[] = [];

  constructor(
    private readonly state: InstanceState,
    private readonly lifecycle: Lifecycle,
  ) {}

  /**
   * A new channel to the agent. False when the agent is gone too (the new channel found a fresh
   * one: the services went with the old), when the limit is reached, or when the guest cannot be
   * reached.
   */
  async attempt(reason: { code: string; message: string }): Promise<boolean> {
    const now = Date.now();
    this.#at = this.#at.filter((at) => now - at < REATTACH_WINDOW_MS);
    if (this.#at.length >= REATTACH_LIMIT) return false;
    this.#at.push(now);
    try {
      const supervisor = await this.lifecycle.reattachAgent();
      if (supervisor.hello.sessions > 0) {
        this.state.log.warn(`the guest agent's channel closed (${reason.message}); reattached, its services kept`);
        return true;
      }
      return false;
    } catch (error) {
      this.state.log.warn(`reattaching the guest agent failed: ${String(error)}`);
      return false;
    }
  }
}
