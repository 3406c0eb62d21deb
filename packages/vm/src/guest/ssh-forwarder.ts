// The host end of a guest terminal: a 127.0.0.1 forwarder to the guest's sshd, its key files, and
// the one place that spells out the ssh client's options (the CLI's `shell` and `exec -it` run
// this command as it is; see sshClientArgv).

import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server, type Socket } from "node:net";
import os from "node:os";
import path from "node:path";
import type { Duplex } from "node:stream";
import { VmError } from "../errors.js";
import type { GuestSshAccess } from "./guest-vm.js";

/** How long a forwarder with no open session stays up before closing itself, in ms. */
export const DEFAULT_SSH_IDLE_TIMEOUT_MS = 10 * 60_000;

/** Upper bound of closing a forwarder (its server and sessions), in ms. */
const CLOSE_TIMEOUT_MS = 3_000;

const hostKeyLine = /^(ssh-ed25519|ecdsa-sha2-nistp(?:256|384|521)|ssh-rsa) ([A-Za-z0-9+/]+={0,3})(?:[ \t].*)?$/;

/**
 * The host keys in `ssh_host_*_key.pub` text, as `type base64` pairs. The text comes from the
 * guest, so only the key type and blob are kept: the guest cannot add markers (`@cert-authority`),
 * host patterns or options to the known_hosts file we write around them.
 */
export function parseHostKeys(text: string): string[] {
  const keys: string[] = [];
  for (const line of text.split("\n")) {
    const match = hostKeyLine.exec(line.trim());
    if (match) keys.push(`${match[1]} ${match[2]}`);
  }
  return keys;
}

/** Where {@link sshClientArgv} points ssh. */
export interface SshClientTarget {
  /** Forwarder port on 127.0.0.1. */
  port: number;
  /** Private key file. */
  identityFile: string;
  /** known_hosts file pinning the guest's host keys for `[127.0.0.1]:port`. */
  knownHostsFile: string;
  /** Guest user. */
  user: string;
}

/**
 * The ssh client's argv for a forwarder, the only list of its options. `-F none` reads no config
 * file (neither `~/.ssh/config` nor `/etc/ssh/ssh_config`), so a user's `Host *` block cannot add
 * X11 or agent forwarding, port forwardings, ProxyCommand, LocalCommand, ControlMaster or SendEnv
 * to a session into an untrusted guest. Everything the session needs is therefore given here:
 * our key and no other (no agent either), forwarding off even though those are the defaults, and
 * the host key pinned in our known_hosts file only (no global file, no updates from the guest).
 * `-p` comes first so the command reads `ssh -p <port> …`.
 */
export function sshClientArgv(target: SshClientTarget): string[] {
  return [
    "ssh",
    "-p",
    String(target.port),
    "-F",
    "none",
    "-i",
    target.identityFile,
    "-o",
    "IdentitiesOnly=yes",
    "-o",
    "IdentityAgent=none",
    "-o",
    "ForwardAgent=no",
    "-o",
    "ForwardX11=no",
    "-o",
    "ClearAllForwardings=yes",
    "-o",
    `UserKnownHostsFile=${target.knownHostsFile}`,
    "-o",
    "GlobalKnownHostsFile=/dev/null",
    "-o",
    "UpdateHostKeys=no",
    "-o",
    "StrictHostKeyChecking=yes",
    `${target.user}@127.0.0.1`,
  ];
}

/** What a {@link SshForwarder} needs: the guest side is reached through `connect` only. */
export interface SshForwarderOptions {
  /** Guest user the identity is authorised for. */
  user: string;
  /** The OpenSSH private key authorised in the guest (written 0600 into a private temp dir). */
  privateKey: string | Buffer;
  /** `type base64` host keys of the guest's sshd (see {@link parseHostKeys}); at least one. */
  hostKeys: readonly string[];
  /** Opens a stream to the guest's sshd (for a VM: `connectTcp(22)`). */
  connect: () => Promise<Duplex>;
  /** Close after this long with no session open. */
  idleTimeoutMs: number;
  /** Called once the forwarder has closed, for whatever reason. */
  onClose?: () => void;
}

/**
 * A `127.0.0.1` TCP forwarder to the guest's sshd, with its key files: the identity and a
 * known_hosts file that pins the guest's host keys for this port. It closes itself (files
 * included) after `idleTimeoutMs` with no session open, and on {@link close}.
 */
export class SshForwarder implements GuestSshAccess {
  /** Ready-to-run `ssh …` command with strict host key checking against {@link knownHostsFile}. */
  readonly command: string;
  /** Host port on 127.0.0.1. */
  readonly port: number;
  /** Guest user. */
  readonly user: string;
  /** The private key file named by the command. */
  readonly identityFile: string;
  /** The known_hosts file named by the command. */
  readonly knownHostsFile: string;
  /** Idle time before the forwarder closes itself, in ms. */
  readonly idleTimeoutMs: number;
  readonly #dir: string;
  readonly #server: Server;
  readonly #connect: () => Promise<Duplex>;
  readonly #onClose: (() => void) | undefined;
  readonly #clients = new Set<Socket>();
  readonly #streams = new Set<Duplex>();
  #idleTimer: NodeJS.Timeout | undefined;
  #closing: Promise<void> | undefined;

  private constructor(options: SshForwarderOptions, dir: string, server: Server, port: number) {
    this.user = options.user;
    this.port = port;
    this.idleTimeoutMs = options.idleTimeoutMs;
    this.#dir = dir;
    this.#server = server;
    this.#connect = options.connect;
    this.#onClose = options.onClose;
    this.identityFile = path.join(dir, "id_ed25519");
    this.knownHostsFile = path.join(dir, "known_hosts");
    this.command = sshClientArgv({
      port,
      identityFile: this.identityFile,
      knownHostsFile: this.knownHostsFile,
      user: options.user,
    })
      .map(shellWord)
      .join(" ");
    server.on("connection", (client: Socket) => this.#forward(client));
  }

  /** Writes the key files into a fresh private temp dir and starts listening on an ephemeral port. */
  static async open(options: SshForwarderOptions): Promise<SshForwarder> {
    if (options.hostKeys.length === 0) {
      throw new VmError("VM_SSH_FAILED", "the guest's sshd offered no host key to pin", {
        hint: "check /etc/ssh in the guest",
      });
    }
    // mkdtemp makes a new directory (mode 0700, ours) with a random name, never an existing one.
    const dir = await mkdtemp(path.join(os.tmpdir(), "pisb-ssh-"));
    const server = createServer();
    try {
      await writeFile(path.join(dir, "id_ed25519"), options.privateKey, { mode: 0o600, flag: "wx" });
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen({ host: "127.0.0.1", port: 0 }, () => {
          server.off("error", reject);
          resolve();
        });
      });
      const port = (server.address() as { port: number }).port;
      // ssh looks a non-default port up as "[host]:port".
      const knownHosts = options.hostKeys.map((key) => `[127.0.0.1]:${port} ${key}\n`).join("");
      await writeFile(path.join(dir, "known_hosts"), knownHosts, { mode: 0o600, flag: "wx" });
      const forwarder = new SshForwarder(options, dir, server, port);
      forwarder.#armIdleTimer();
      return forwarder;
    } catch (error) {
      server.close();
      await rm(dir, { recursive: true, force: true });
      throw error;
    }
  }

  /** Whether the forwarder has closed (or is closing). */
  get closed(): boolean {
    return this.#closing !== undefined;
  }

  /** Number of open sessions (client connections). */
  get sessionCount(): number {
    return this.#clients.size;
  }

  /** Restarts the idle countdown when no session is open (the access was handed out again). */
  keepAlive(): void {
    if (this.#clients.size === 0) this.#armIdleTimer();
  }

  /** Stops listening, cuts every session and removes the key files. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    clearTimeout(this.#idleTimer);
    const serverClosed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    for (const client of this.#clients) client.destroy();
    for (const stream of this.#streams) stream.destroy();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([serverClosed, new Promise<void>((resolve) => (timer = setTimeout(resolve, CLOSE_TIMEOUT_MS)))]);
    clearTimeout(timer);
    await rm(this.#dir, { recursive: true, force: true }).catch(() => undefined);
    this.#onClose?.();
  }

  #armIdleTimer(): void {
    clearTimeout(this.#idleTimer);
    if (this.closed) return;
    this.#idleTimer = setTimeout(() => void this.close(), this.idleTimeoutMs);
    // The forwarder alone must not keep a process alive.
    this.#idleTimer.unref();
  }

  #forward(client: Socket): void {
    if (this.closed) {
      client.destroy();
      return;
    }
    clearTimeout(this.#idleTimer);
    this.#clients.add(client);
    client.setNoDelay(true);
    client.on("error", () => undefined);
    client.once("close", () => {
      this.#clients.delete(client);
      if (this.#clients.size === 0) this.#armIdleTimer();
    });
    this.#connect().then(
      (stream) => {
        if (client.destroyed || this.closed) {
          stream.destroy();
          return;
        }
        this.#streams.add(stream);
        stream.on("error", () => client.destroy());
        stream.once("close", () => {
          this.#streams.delete(stream);
          // After a clean end, pipe() ends the client once what the guest sent is flushed; a
          // stream cut without one must not leave the client waiting.
          if (!stream.readableEnded) client.destroy();
        });
        client.once("close", () => stream.destroy());
        client.pipe(stream).pipe(client);
      },
      () => client.destroy(),
    );
  }
}

/** `value` as one shell word: left alone when it holds only safe characters, else single-quoted. */
function shellWord(value: string): string {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(value) ? value : `'${value.replace(/'/g, "'\\''")}'`;
}
