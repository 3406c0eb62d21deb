// Every use of Gondolin 0.12 internals, in one place. Gondolin's public API has no way to open a
// raw TCP stream to a guest port (its IngressGateway answers HTTP only, with a 2 s header
// timeout), none to see how much its shared ingress queue holds, no event for QEMU exiting by
// itself, and no way to dial a host-mapped TCP flow before the guest's first byte. These reach
// into `VM.server` (a SandboxServer) and its `network` (a QemuNetworkBackend).
// `test/gondolin-contract.test.ts` checks each against the installed Gondolin, so an upgrade that
// moves them fails loudly there.

import type { Duplex } from "node:stream";
import type { VM } from "@earendil-works/gondolin";
import { VmError } from "./errors.js";

/**
 * The QEMU drive id Gondolin gives the root disk (`-drive file=…,if=none,id=drive0`, in its
 * `buildQemuArgs`): what QMP's `blockdev-snapshot-sync` names to switch the disk's layer.
 */
export const GONDOLIN_ROOT_DRIVE = "drive0";

/** The private SandboxServer methods and fields used here. */
export interface IngressCapableServer {
  /** Opens a stream to `host:port` inside the guest over the ingress virtio channel. */
  openIngressStream(target: { host: string; port: number; timeoutMs?: number }): Promise<Duplex>;
  /** The virtio queue under every ingress stream (optional: only paces writes). */
  ingressBridge?: { pendingBytes?: number; socket?: { writableLength?: number } | null };
  /** EventEmitter: `exit` when QEMU ends. */
  on?(event: string, listener: () => void): unknown;
}

function serverOf(vm: VM): Partial<IngressCapableServer> | undefined {
  const server = (vm as unknown as { server?: unknown }).server;
  return server && typeof server === "object" ? (server as Partial<IngressCapableServer>) : undefined;
}

/** The VM's server with its ingress connector, or VM_GONDOLIN_INCOMPATIBLE. */
export function ingressServerOf(vm: VM): IngressCapableServer {
  const server = serverOf(vm);
  if (!server || typeof server.openIngressStream !== "function") {
    throw new VmError(
      "VM_GONDOLIN_INCOMPATIBLE",
      "this Gondolin version no longer exposes the ingress stream connector that connectTcp uses",
      {
        hint: "install the Gondolin version @pi-sandbox/vm was built for (0.12.x)",
        details: { missing: "VM.server.openIngressStream" },
      },
    );
  }
  return server as IngressCapableServer;
}

/** Bytes Gondolin holds for the guest on the ingress channel, all streams together. */
export function ingressQueuedBytes(server: IngressCapableServer): number {
  const bridge = server.ingressBridge;
  return (bridge?.pendingBytes ?? 0) + (bridge?.socket?.writableLength ?? 0);
}

/**
 * Whether the guest closed this ingress stream (Gondolin's `closedByRemote`), as opposed to
 * Gondolin destroying it as the VM closes; true when the stream does not say.
 */
export function ingressClosedByGuest(stream: Duplex): boolean {
  return (stream as Duplex & { closedByRemote?: unknown }).closedByRemote !== false;
}

/** Calls `listener` when the VM's QEMU exits (by itself or closed); false when Gondolin offers no such event. */
export function onQemuExit(vm: VM, listener: () => void): boolean {
  const server = serverOf(vm);
  if (typeof server?.on !== "function") return false;
  server.on("exit", listener);
  return true;
}

/** The private QemuNetworkBackend members {@link dialMappedTcpOnConnect} uses. */
interface MappedTcpBackend {
  /** The network stack's callback for a guest SYN; `allowRawTcp` marks a host-mapped flow. */
  handleTcpConnect(message: { key: string }): { allowRawTcp?: boolean } | undefined;
  /** Flow state by key, created by `handleTcpConnect`. */
  tcpSessions: { get(key: string): unknown };
  /** Opens the host socket of a flow (idempotent); Gondolin calls it at the guest's first byte. */
  ensureTcpSocket(key: string, session: unknown): void;
}

/**
 * Makes the VM's host-mapped TCP flows (`tcp.hosts`) dial the host when the guest connects, not
 * when it first sends. Gondolin completes the guest's handshake itself and opens the host socket
 * only at the first byte of data, so a protocol whose server speaks first (MySQL, SMTP) waited
 * forever, and a client that only listened never learnt that nothing listened on the host. Now
 * the server's greeting reaches the guest, and a refused host connection resets the guest's
 * connection at once. Other flows are untouched (they are never dialled raw). False when
 * Gondolin offers no such members (mapped flows then work as Gondolin has them).
 */
export function dialMappedTcpOnConnect(vm: VM): boolean {
  const network = (serverOf(vm) as { network?: Partial<MappedTcpBackend> | null } | undefined)?.network;
  if (
    !network ||
    typeof network.handleTcpConnect !== "function" ||
    typeof network.ensureTcpSocket !== "function" ||
    typeof network.tcpSessions?.get !== "function"
  ) {
    return false;
  }
  const backend = network as MappedTcpBackend;
  const handleTcpConnect = backend.handleTcpConnect;
  backend.handleTcpConnect = function (this: MappedTcpBackend, message) {
    const decision = handleTcpConnect.call(this, message);
    if (decision?.allowRawTcp) {
      const session = this.tcpSessions.get(message.key);
      if (session) this.ensureTcpSocket(message.key, session);
    }
    return decision;
  };
  return true;
}

/** The inode table of the VM's file-system service ({@link vfsInodesOf}). */
export interface VfsInodeTable {
  /** The next inode number the service hands out. */
  nextIno: number;
  /** Inode number and the VFS paths it names. */
  entries: Array<[number, string[]]>;
}

/** The private FsRpcService members the inode table lives in. */
interface FsRpcInodes {
  nextIno: number;
  pathToIno: Map<string, number>;
  inoToPaths: Map<number, Set<string>>;
}

function fsInodesOf(vm: VM): FsRpcInodes | undefined {
  const service = (serverOf(vm) as { fsService?: Partial<FsRpcInodes> | null } | undefined)?.fsService;
  if (
    !service ||
    typeof service.nextIno !== "number" ||
    !(service.pathToIno instanceof Map) ||
    !(service.inoToPaths instanceof Map)
  ) {
    return undefined;
  }
  return service as FsRpcInodes;
}

/**
 * The inode numbers Gondolin's file-system service gave the guest's FUSE mount (`/etc/gondolin`,
 * host mounts). The guest kernel names files by these numbers, and a new Gondolin VM starts its
 * table afresh, so a guest restored from saved memory gets ENOENT for every file it had looked up
 * unless the new table is seeded with this one ({@link seedVfsInodes}). Undefined when the VM has
 * no such service or this Gondolin keeps the table elsewhere.
 */
export function vfsInodesOf(vm: VM): VfsInodeTable | undefined {
  const service = fsInodesOf(vm);
  if (!service) return undefined;
  return {
    nextIno: service.nextIno,
    entries: [...service.inoToPaths].map(([ino, paths]) => [ino, [...paths]]),
  };
}

/** Replaces the VM's inode table with a saved one (before the restored guest runs); false if it has none. */
export function seedVfsInodes(vm: VM, table: VfsInodeTable): boolean {
  const service = fsInodesOf(vm);
  if (!service) return false;
  service.pathToIno.clear();
  service.inoToPaths.clear();
  for (const [ino, paths] of table.entries) {
    service.inoToPaths.set(ino, new Set(paths));
    for (const entry of paths) service.pathToIno.set(entry, ino);
  }
  service.nextIno = table.nextIno;
  return true;
}
