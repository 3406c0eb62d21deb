// The one port through which an instance's daemon reaches the machinery below it: VM boot, the
// guest agent, the preview gateway and the disk store. The daemon takes it as a parameter (as
// Lima's host agent takes its driver), so every lifecycle transition runs in fast tests over
// host processes (`createLocalRuntime` in ../testing.ts) as well as on real VMs.

import type { SandboxConfig } from "@pi-sandbox/config";
import { JsonFilePortLeaseStore, PreviewGateway, guestVmConnector, type TcpConnectable } from "@pi-sandbox/ingress";
import {
  AGENT_SEED_PATH,
  SupervisorClient,
  agentBootArgument,
  type GuestIdentity,
  writeAgentSeed,
  type AgentDoor,
} from "@pi-sandbox/supervisor";
import {
  DiskStore,
  startVm,
  type EgressApprover,
  type EgressEvent,
  type GuestVm,
  type KeepOptions,
  type KeptCheckpoint,
  type KeptCheckpointInfo,
  type RunRecovery,
  type UpstreamOverrides,
  type VmError,
  type VmMount,
  type VmSecret,
} from "@pi-sandbox/vm";
import type { CheckpointOutcome } from "./auto-checkpoint.js";
import { giveOwnIdentity } from "./guest-identity.js";
import type { DaemonLogger } from "../log.js";

export type { KeepOptions, KeptCheckpoint, KeptCheckpointInfo };

/**
 * How long a booted guest's agent may take to say hello. Python's start-up is CPU-bound; under
 * software emulation on a busy host it took over 60 s (the supervisor's default) while the guest
 * was healthy, so TCG guests get three minutes.
 */
function agentStartTimeoutMs(accel: string): number {
  return accel === "tcg" ? 180_000 : 60_000;
}

/** A booted guest as the daemon uses it. `RunningVm` of `@pi-sandbox/vm` is one. */
export interface RuntimeVm extends GuestVm {
  /** Accelerator in use and why. */
  readonly accelerator: { readonly accel: string; readonly reason: string };
  /** Notes for the user from the boot (software emulation, a fall-back to TCG). */
  readonly warnings: readonly string[];
  /** Milliseconds from the start of the boot to the guest being ready. */
  readonly bootMs: number;
  /** Why the guest cannot answer while its VM still runs (e.g. a full host disk), else undefined. */
  readonly fault: VmError | undefined;
  /** Saves the disk (a checkpoint) and ends the VM. */
  stop(): Promise<{ totalMs: number }>;
  /**
   * Checkpoints the disk while the guest runs (see `RunningVm.checkpoint`): what it wrote so far
   * becomes the current checkpoint, after a short stall of its disk I/O; `changed` false when
   * nothing was written since the last one. The VM runs on, also when it fails. With `keep`, the
   * checkpoint is also kept (see `RuntimeDisks.keepCheckpoint`), written or not.
   */
  checkpoint(options?: {
    keep?: KeepOptions;
  }): Promise<CheckpointOutcome & { kept?: KeptCheckpoint; pauseMs?: number }>;
  /** When QEMU last wrote the disk, in ms since the epoch (a `stat`: cheap); undefined when unknown. */
  readonly diskWrittenAtMs: number | undefined;
  /**
   * Saves the guest's memory next to a checkpoint of the same instant and ends the VM: the next
   * boot of the disk resumes it (see {@link restore}). A runtime that cannot keep memory may
   * checkpoint only (`memoryBytes` 0), and its next boot is cold.
   */
  suspend(): Promise<{ totalMs: number; memoryBytes: number }>;
  /** Set when the disk held a run its controller never finished: recovered, or set aside. */
  readonly recovery: RunRecovery | undefined;
  /** Set when the boot found saved memory: resumed (`warm`), or booted cold and why. */
  readonly restore: { warm: true; restoreMs: number } | { warm: false; reason: string } | undefined;
  /**
   * Ends the VM without a checkpoint: everything since the boot is dropped, or with `keepRun`
   * left for the next boot to recover (a VM whose QEMU died on its own).
   */
  close(options?: { keepRun?: boolean }): Promise<void>;
  /**
   * Replaces a secret's value from the next request on; with `placeholder`, also what the guest
   * sends for it (earlier placeholders keep working until the VM stops).
   */
  updateSecret(name: string, value: string, placeholder?: string): void;
}

/** The disk operations the daemon needs (`DiskStore` of `@pi-sandbox/vm` provides them). */
export interface RuntimeDisks {
  /** A new disk in `dir` from an image. */
  createDisk(dir: string, options: { image?: string; diskGiB: number }): Promise<unknown>;
  /**
   * A new disk in `dir` from the template disk in `templateDir` (copy-on-write); `memoryBytes` > 0
   * when it got the template's saved memory, which its first start resumes.
   */
  createFromTemplate(templateDir: string, dir: string): Promise<{ memoryBytes: number }>;
  /**
   * Publishes the stopped (or suspended) disk in `dir` as a template disk in `templateDir`;
   * `memoryBytes` > 0 when a suspend's memory came with it.
   */
  createTemplate(dir: string, templateDir: string): Promise<{ memoryBytes: number }>;
  /** Removes a disk (VM_DISK_NOT_FOUND when there is none). */
  destroy(dir: string): Promise<unknown>;
  /** Deletes the memory a suspend saved with the disk's checkpoint; the next boot is cold. */
  dropSavedMemory(dir: string): Promise<unknown>;
  /** The kept checkpoints of the disk in `dir`, oldest first, with the bytes only they hold. */
  checkpoints(dir: string): Promise<KeptCheckpointInfo[]>;
  /** Keeps the current checkpoint of a disk that does not run (`memory`: its saved memory too). */
  keepCheckpoint(dir: string, options: KeepOptions): Promise<KeptCheckpoint>;
  /** Removes a kept checkpoint (by id). */
  removeCheckpoint(dir: string, id: string): Promise<KeptCheckpoint>;
  /** Makes a kept checkpoint (by id) the disk's current state; the disk must not run. */
  rewind(dir: string, id: string): Promise<KeptCheckpoint>;
  /**
   * A new instance disk in `dir` sharing the layers of the disk in `sourceDir` (which must not run),
   * and its saved memory when it has one (`memoryBytes` > 0): the fork's first start resumes it.
   * With `checkpoint`, of that kept checkpoint (its memory too, if kept); the source may run.
   */
  fork(sourceDir: string, dir: string, options?: { checkpoint?: string }): Promise<{ memoryBytes: number }>;
}

/** How the daemon opens an instance's preview gateway. */
export interface GatewayOptions {
  /** ports.json: the leased host ports (and the recorded address). */
  portsFile: string;
  /** The loopback address previews bind (see preview-address.ts). */
  address: string;
  /** Ports a new preview must not take: every instance's leases and host ports. */
  avoidPorts: () => Promise<Iterable<number>>;
  /** Log sink. */
  logger: DaemonLogger;
  /** Asked before each preview request is forwarded: resumes an instance that suspended itself (see ingress). */
  wake: () => Promise<void> | undefined;
}

/** What the daemon asks of the layers below. */
export interface InstanceRuntime {
  /** The disk store of the state root. */
  readonly disks: RuntimeDisks;
  /**
   * Boots the disk in `diskDir` with the config's resources and network policy, the secrets and
   * mounts as resolved for this start.
   */
  bootVm(options: {
    name: string;
    diskDir: string;
    config: SandboxConfig;
    secrets: Record<string, VmSecret>;
    mounts: VmMount[];
    /**
     * The disk is new from an image, with no agent yet: the guest also gets the agent's seed, so
     * its init starts the agent while it boots (as it does from the agent's own script later).
     */
    seedAgent?: boolean;
    logger: DaemonLogger;
    onProgress: (message: string) => void;
    /** Each egress decision and secret use of the guest, for the ledger. */
    onEgress?: (event: EgressEvent) => void;
    /** Asked about each request to a host off allowedHosts; absent: refused at once. */
    approveEgress?: EgressApprover;
  }): Promise<RuntimeVm>;
  /**
   * Installs and starts the guest agent in `vm`, for the config's workspace. A new guest's
   * `identity` goes with the hello; the client's `identityApplied` says whether the agent wrote it.
   */
  startAgent(
    vm: RuntimeVm,
    options: {
      workspace: string;
      logger: DaemonLogger;
      door?: AgentDoor | undefined;
      identity?: GuestIdentity | undefined;
    },
  ): Promise<SupervisorClient>;
  /**
   * Gives a new guest (an instance or template) its own machine-id, hostname (`name`) and ssh
   * host keys by an exec through its agent (guest-identity.ts), when the hello did not.
   */
  giveOwnIdentity(supervisor: SupervisorClient, name: string): Promise<void>;
  /**
   * The preview gateway of an instance: previews bind `address` (the instance's own loopback
   * address), host ports are leased in `portsFile`, and a new lease avoids `avoidPorts()`. Guest
   * connections go through `guest` when they are made, so one gateway outlives an auto-suspend
   * and reaches the VM of the next run.
   */
  openGateway(guest: TcpConnectable, options: GatewayOptions): PreviewGateway;
}

/**
 * The real runtime: Gondolin VMs, the Python agent in the guest, localhost previews.
 * `allowedInternalHosts` and `upstream` are test seams (a host-side fake API under an allowed
 * name; its self-signed CA and port for the guest's HTTPS to port 443, used with secrets); the
 * daemon never passes them.
 */
export function createVmRuntime(options: {
  stateRoot: string;
  /** Where the agent's first-boot seeds are kept (one directory per agent and placement). */
  agentSeeds: string;
  allowedInternalHosts?: readonly string[];
  upstream?: UpstreamOverrides;
}): InstanceRuntime {
  const disks = new DiskStore({ stateRoot: options.stateRoot });
  return {
    disks,
    bootVm: async ({
      name,
      diskDir,
      config,
      secrets,
      mounts,
      seedAgent,
      logger,
      onProgress,
      onEgress,
      approveEgress,
    }) => {
      // The image's init starts the agent daemon startAgent attaches to, when the disk holds it or
      // (a new disk) from the seed shared read-only here. Not with secrets: Gondolin gives their
      // placeholders to each exec's environment, not to the guest's init, so only a daemon started
      // by the first exec passes them on to commands.
      const atBoot = Object.keys(secrets).length === 0;
      const placement = { workspace: config.workspace };
      const seed =
        atBoot && seedAgent
          ? [{ hostPath: await writeAgentSeed(options.agentSeeds, placement), guestPath: AGENT_SEED_PATH }]
          : [];
      return startVm({
        name,
        kernelArgs: atBoot ? [await agentBootArgument(placement)] : [],
        diskDir,
        spec: {
          resources: config.resources,
          network: { allowedHosts: config.network.allowedHosts, hostPorts: config.network.hostPorts ?? [], secrets },
          mounts: [...mounts, ...seed],
        },
        stateRoot: options.stateRoot,
        logger,
        diskStore: disks,
        onProgress,
        ...(onEgress ? { onEgress } : {}),
        ...(approveEgress ? { approveEgress } : {}),
        ...(options.allowedInternalHosts ? { allowedInternalHosts: options.allowedInternalHosts } : {}),
        ...(options.upstream ? { upstream: options.upstream } : {}),
      });
    },
    startAgent: (vm, { workspace, logger, door, identity }) =>
      SupervisorClient.start({
        vm,
        workspace,
        logger,
        startTimeoutMs: agentStartTimeoutMs(vm.accelerator.accel),
        ...(door ? { door } : {}),
        ...(identity ? { identity } : {}),
      }),
    giveOwnIdentity,
    openGateway: (guest, { portsFile, address, avoidPorts, logger, wake }) =>
      new PreviewGateway({
        connector: guestVmConnector(guest),
        leases: new JsonFilePortLeaseStore(portsFile),
        address,
        avoidPorts,
        logger,
        wake,
      }),
  };
}
