// SSH into a Gondolin guest for a user on the host: Gondolin sets the guest up (sshd on the guest's
// loopback, a fresh key in the user's authorized_keys), then our SshForwarder replaces Gondolin's
// forwarder, which would accept host connections until the VM closes and skips host key checks.
// Every access has a key and a forwarder of its own (ssh-keys.ts), authorised while it is open.

import { readFile } from "node:fs/promises";
import type { Duplex } from "node:stream";
import type { VM } from "@earendil-works/gondolin";
import { VmError, messageOf } from "../errors.js";
import { runInGuest } from "./exec-util.js";
import type { GuestFault } from "./guest-fault.js";
import type { GuestSshAccess, GuestSshOptions, GuestVm } from "./guest-vm.js";
import { DEFAULT_SSH_IDLE_TIMEOUT_MS, parseHostKeys, SshForwarder } from "./ssh-forwarder.js";
import { authorizeKey, generateSshKeyPair, publicKeyOf, revokeKey, type SshKeyPair } from "./ssh-keys.js";

/** Upper bound of removing a closed access's key from the guest, in ms (a hung guest must not block the queue). */
const REVOKE_TIMEOUT_MS = 10_000;

/**
 * At most this many accesses without a session stay open per guest: every call makes one (`exec
 * -i` too), and each holds a port, key files and an authorized_keys line until it idles out.
 */
export const MAX_IDLE_SSH_ACCESSES = 16;

/**
 * The accesses to close so that at most `max` of those without a session stay open: the oldest
 * first (`accesses` in the order they opened). Accesses with a session are never chosen.
 */
export function idleAccessesBeyond<T extends { readonly sessionCount: number; readonly closed: boolean }>(
  accesses: Iterable<T>,
  max: number,
): T[] {
  const idle = [...accesses].filter((access) => !access.closed && access.sessionCount === 0);
  return idle.slice(0, Math.max(0, idle.length - max));
}

/** How long a slow guest's sshd may take to send its banner after Gondolin gave up on it, in ms. */
const SSHD_BANNER_TIMEOUT_MS = 60_000;

type GondolinSshAccess = Awaited<ReturnType<VM["enableSsh"]>>;

/** Gondolin's SSH setup failure as our coded error, with a hint for the causes it names. */
function sshSetupError(error: unknown, user: string): VmError {
  const message = messageOf(error);
  const tool = /sshd not/.test(message) ? "sshd" : /sandboxssh not/.test(message) ? "sandboxssh" : undefined;
  if (tool) {
    return new VmError("VM_IMAGE_MISSING_TOOL", `the guest image has no ${tool}, which the terminal needs`, {
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
  return new VmError("VM_SSH_FAILED", `SSH into the guest could not be enabled: ${message}`, {
    hint,
    cause: error,
    details: { user, reason: message },
  });
}

/**
 * Resolves once the guest's port 22 answers with an SSH banner, trying again every 0.5 s; rejects
 * with the last failure after `timeoutMs`.
 */
export async function awaitSshBanner(guest: Pick<GuestVm, "connectTcp">, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const left = deadline - Date.now();
    try {
      const stream = await guest.connectTcp(22, { timeoutMs: Math.max(1, Math.min(left, 5_000)) });
      try {
        const banner = await firstChunk(stream, Math.max(1, Math.min(left, 5_000)));
        if (banner.startsWith("SSH-")) return;
        throw new Error(`unexpected ssh banner: ${JSON.stringify(banner.slice(0, 32))}`);
      } finally {
        stream.destroy();
      }
    } catch (error) {
      if (Date.now() + 500 >= deadline) throw error;
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** The first data `stream` sends, as text; rejects when it errs, ends or stays silent `timeoutMs`. */
function firstChunk(stream: Duplex, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const done = (settle: () => void) => {
      clearTimeout(timer);
      stream.off("data", onData).off("error", onError).off("end", onEnd);
      settle();
    };
    const onData = (chunk: Buffer) => done(() => resolve(chunk.toString("utf8")));
    const onError = (error: Error) => done(() => reject(error));
    const onEnd = () => done(() => reject(new Error("the connection closed before an ssh banner")));
    const timer = setTimeout(() => done(() => reject(new Error("ssh banner timeout"))), timeoutMs);
    stream.on("data", onData).on("error", onError).on("end", onEnd);
  });
}

/** What SSH needs to know of its VM's state. */
export interface SshVmState {
  /** Raised when the guest can no longer answer. */
  readonly fault: GuestFault;
  /** Whether the VM is closed or exited. */
  closed(): boolean;
  /** The error for an operation on a closed VM. */
  closedError(): VmError;
}

/**
 * The SSH accesses of one guest. Each call gets a new key pair and its own forwarder; the key is
 * in the user's authorized_keys while its forwarder is open and removed when it closes. Setups and
 * removals run one at a time, so authorized_keys is never written by two at once.
 */
export class GuestSsh {
  private readonly accesses = new Set<SshForwarder>();
  private queue: Promise<unknown> = Promise.resolve();
  private closing = false;

  constructor(
    private readonly vm: VM,
    /** The guest as a {@link GuestVm}: commands and TCP streams go through it. */
    private readonly guest: GuestVm,
    private readonly vmState: SshVmState,
  ) {}

  /**
   * SSH for a user on the host with a newly made key. With no access of that user open, Gondolin
   * sets up the guest (sshd, and authorized_keys rewritten with its fresh key, which we take);
   * otherwise a key made here is added next to the open ones, which keep working. Either way our
   * {@link SshForwarder} serves it, and its close (idle timeout, `close()`, the VM's close)
   * removes that key from authorized_keys again.
   */
  enable(options: GuestSshOptions = {}): Promise<GuestSshAccess> {
    return this.enqueue(() => this.enableNow(options));
  }

  private enqueue<T>(work: () => Promise<T>): Promise<T> {
    const run = this.queue.then(work);
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async enableNow(options: GuestSshOptions): Promise<GuestSshAccess> {
    const { signal } = options;
    signal?.throwIfAborted();
    if (this.vmState.closed()) throw this.vmState.closedError();
    const user = options.user ?? "root";
    const key = this.hasOpen(user) ? await this.addKey(user, signal) : await this.setUp(user);
    let forwarder: SshForwarder | undefined;
    try {
      const hostKeys = await this.readHostKeys(signal);
      signal?.throwIfAborted();
      if (this.vmState.closed()) throw this.vmState.closedError();
      forwarder = await this.openForwarder(user, key, hostKeys, options);
    } catch (error) {
      this.scheduleRevoke(user, key.publicKey);
      throw error;
    }
    if (this.vmState.closed() || signal?.aborted) {
      // The VM closed (or the caller gave up) while the forwarder opened: closeAll() did not see it.
      await forwarder.close();
      throw signal?.aborted ? signal.reason : this.vmState.closedError();
    }
    return forwarder;
  }

  /** Whether `user` has an access that is open (its key is authorised and sshd runs). */
  private hasOpen(user: string): boolean {
    for (const access of this.accesses) if (access.user === user && !access.closed) return true;
    return false;
  }

  private async openForwarder(
    user: string,
    key: SshKeyPair,
    hostKeys: string[],
    options: GuestSshOptions,
  ): Promise<SshForwarder> {
    const forwarder: SshForwarder = await SshForwarder.open({
      user,
      privateKey: key.privateKey,
      hostKeys,
      connect: () => this.guest.connectTcp(22, { timeoutMs: 10_000 }),
      idleTimeoutMs: options.idleTimeoutMs ?? DEFAULT_SSH_IDLE_TIMEOUT_MS,
      onClose: () => {
        this.accesses.delete(forwarder);
        this.scheduleRevoke(user, key.publicKey);
      },
    });
    this.accesses.add(forwarder);
    for (const old of idleAccessesBeyond(this.accesses, MAX_IDLE_SSH_ACCESSES)) void old.close();
    return forwarder;
  }

  /** Gondolin's setup (sshd, authorized_keys with only its new key); we keep a copy of that key. */
  private async setUp(user: string): Promise<SshKeyPair> {
    const access = await this.gondolinSsh(user);
    try {
      const [privateKey, publicLine] = await Promise.all([
        readFile(access.identityFile),
        readFile(`${access.identityFile}.pub`, "utf8"),
      ]);
      return { privateKey, publicKey: publicKeyOf(publicLine) };
    } finally {
      // Gondolin's forwarder and key files go at once; ours takes over with the copy.
      await access.close().catch(() => undefined);
    }
  }

  /** A new key pair, added to the authorized_keys of a user whose sshd setup is in place. */
  private async addKey(user: string, signal: AbortSignal | undefined): Promise<SshKeyPair> {
    const key = await generateSshKeyPair();
    await this.vmState.fault.race(authorizeKey(this.guest, user, key.publicKey, signal));
    return key;
  }

  /**
   * Queues the removal of a key from the guest (after the setups queued before it). Best effort:
   * the key's private file is gone already, and the next setup with no access open rewrites the
   * file. Skipped once the VM closes.
   */
  private scheduleRevoke(user: string, publicKey: string): void {
    void this.enqueue(async () => {
      if (this.closing || this.vmState.closed()) return;
      const signal = AbortSignal.timeout(REVOKE_TIMEOUT_MS);
      await this.vmState.fault.race(revokeKey(this.guest, user, publicKey, signal)).catch(() => false);
    });
  }

  /**
   * Runs Gondolin's SSH setup in the guest, with its failures mapped to our codes. Gondolin gives
   * the sshd it starts 10 s to send its banner; a TCG guest on a busy host can take longer. Then we
   * wait for the banner ourselves, up to {@link SSHD_BANNER_TIMEOUT_MS}, and run the setup again:
   * it rewrites authorized_keys, and its second sshd fails to bind beside the first, harmlessly.
   */
  private async gondolinSsh(user: string): Promise<GondolinSshAccess> {
    try {
      try {
        return await this.gondolinSshOnce(user);
      } catch (error) {
        if (error instanceof VmError || !/port-forward is not available/.test(messageOf(error))) throw error;
        await this.vmState.fault.race(awaitSshBanner(this.guest, SSHD_BANNER_TIMEOUT_MS));
        return await this.gondolinSshOnce(user);
      }
    } catch (error) {
      throw error instanceof VmError ? error : sshSetupError(error, user);
    }
  }

  /** Gondolin's setup, raced against a guest fault (a VmError); its own failures are passed on as they are. */
  private async gondolinSshOnce(user: string): Promise<GondolinSshAccess> {
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
      }
      throw error;
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

  /** Closes every forwarder (their keys stay in the guest, which is closing too). */
  async closeAll(): Promise<void> {
    this.closing = true;
    await Promise.allSettled([...this.accesses].map((access) => access.close()));
  }
}
