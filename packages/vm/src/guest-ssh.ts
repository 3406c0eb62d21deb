// SSH into a Gondolin guest for a user on the host: Gondolin sets the guest up (sshd on the guest's
// loopback, a fresh key in the user's authorized_keys), then our SshForwarder replaces Gondolin's
// forwarder, which would accept host connections until the VM closes and skips host key checks.

import { readFile } from "node:fs/promises";
import type { VM } from "@earendil-works/gondolin";
import { VmError, messageOf } from "./errors.js";
import { runInGuest } from "./exec-util.js";
import type { GuestFault } from "./guest-fault.js";
import type { GuestSshAccess, GuestSshOptions, GuestVm } from "./guest-vm.js";
import { DEFAULT_SSH_IDLE_TIMEOUT_MS, parseHostKeys, SshForwarder } from "./ssh-forwarder.js";

/** What SSH needs to know of its VM's state. */
export interface SshVmState {
  /** Raised when the guest can no longer answer. */
  readonly fault: GuestFault;
  /** Whether the VM is closed or exited. */
  closed(): boolean;
  /** The error for an operation on a closed VM. */
  closedError(): VmError;
}

/** The SSH forwarders of one guest, one per user, set up one at a time. */
export class GuestSsh {
  private readonly accesses = new Map<string, SshForwarder>();
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly vm: VM,
    /** The guest as a {@link GuestVm}: commands and TCP streams go through it. */
    private readonly guest: GuestVm,
    private readonly vmState: SshVmState,
  ) {}

  /**
   * SSH for a user on the host: Gondolin sets up the guest (sshd on the guest's loopback, a fresh
   * key in the user's authorized_keys), then our {@link SshForwarder} replaces Gondolin's
   * forwarder, which would accept host connections until the VM closes and skips host key checks.
   * While a user's forwarder is open, asking again returns it: a second setup would rewrite
   * authorized_keys and lock out the first key.
   */
  enable(options: GuestSshOptions = {}): Promise<GuestSshAccess> {
    const run = this.queue.then(() => this.enableNow(options));
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async enableNow(options: GuestSshOptions): Promise<GuestSshAccess> {
    const { signal } = options;
    signal?.throwIfAborted();
    if (this.vmState.closed()) throw this.vmState.closedError();
    const user = options.user ?? "root";
    const open = this.accesses.get(user);
    if (open && !open.closed) {
      open.keepAlive();
      return open;
    }
    const access = await this.gondolinSsh(user);
    let privateKey: Buffer;
    let hostKeys: string[];
    try {
      privateKey = await readFile(access.identityFile);
      hostKeys = await this.readHostKeys(signal);
    } finally {
      // Gondolin's forwarder and key files go at once; ours (below) takes over with a copy of the key.
      await access.close().catch(() => undefined);
    }
    signal?.throwIfAborted();
    if (this.vmState.closed()) throw this.vmState.closedError();
    const forwarder = await SshForwarder.open({
      user,
      privateKey,
      hostKeys,
      connect: () => this.guest.connectTcp(22, { timeoutMs: 10_000 }),
      idleTimeoutMs: options.idleTimeoutMs ?? DEFAULT_SSH_IDLE_TIMEOUT_MS,
      onClose: () => {
        if (this.accesses.get(user) === forwarder) this.accesses.delete(user);
      },
    });
    if (this.vmState.closed() || signal?.aborted) {
      // The VM closed (or the caller gave up) while the forwarder opened: close() did not see it.
      await forwarder.close();
      throw signal?.aborted ? signal.reason : this.vmState.closedError();
    }
    this.accesses.set(user, forwarder);
    return forwarder;
  }

  /** Runs Gondolin's SSH setup in the guest, with its failures mapped to our codes. */
  private async gondolinSsh(user: string): Promise<Awaited<ReturnType<VM["enableSsh"]>>> {
    const enabling = this.vm.enableSsh({ user });
    try {
      return await this.vmState.fault.race(enabling);
    } catch (error) {
      if (error instanceof VmError) {
        // A paused guest: close the forwarder should it ever come up.
        enabling.then(
          (late) => late.close(),
          () => undefined,
        );
        throw error;
      }
      const message = messageOf(error);
      const tool = /sshd not/.test(message) ? "sshd" : /sandboxssh not/.test(message) ? "sandboxssh" : undefined;
      if (tool) {
        throw new VmError("VM_IMAGE_MISSING_TOOL", `the guest image has no ${tool}, which the terminal needs`, {
          hint: "use an image with OpenSSH server and Gondolin's sandboxssh",
          cause: error,
          details: { tool, needs: "ssh" },
        });
      }
      const hint = /ssh-keygen/.test(message)
        ? "install the OpenSSH client on the host (ssh-keygen)"
        : /does not exist/.test(message)
          ? `create the user ${user} in the guest first`
          : "check that sshd can start in the guest";
      throw new VmError("VM_SSH_FAILED", `SSH into the guest could not be enabled: ${message}`, {
        hint,
        cause: error,
        details: { user, reason: message },
      });
    }
  }

  /**
   * The public host keys of the guest's sshd, read through the guest itself (Gondolin's setup ran
   * `ssh-keygen -A` before starting sshd, and waited for its banner, so they exist by now). The
   * guest could name any key here; that is fine, because the pin only guards the connection we
   * then make to that same guest over the private virtio channel: it stops the printed command
   * from trusting whatever answers on the forwarder's port, not the guest from lying about itself.
   */
  private async readHostKeys(signal: AbortSignal | undefined): Promise<string[]> {
    const result = await runInGuest(
      this.guest,
      ["/bin/sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub 2>/dev/null | head -c 65536"],
      signal ? { signal } : {},
    );
    const keys = parseHostKeys(result.stdout);
    if (keys.length === 0) {
      throw new VmError(
        "VM_SSH_FAILED",
        "SSH into the guest could not be enabled: sshd has no readable host key in /etc/ssh/ssh_host_*_key.pub to pin",
        { hint: "check that ssh-keygen -A works in the guest", details: { reason: "no host key" } },
      );
    }
    return keys;
  }

  /** Closes every forwarder. */
  async closeAll(): Promise<void> {
    await Promise.allSettled([...this.accesses.values()].map((access) => access.close()));
  }
}
