// The public shapes of a VM boot: what it needs (spec, options) and what it gives (RunningVm).
import type { CheckpointResult, DiskStore, KeepOptions, KeptCheckpoint, RunRecovery } from "../disk/disk-store.js";
import type { EgressApprover, EgressEvent, VmSecret } from "../egress/egress-policy.js";
import type { VmError } from "../errors.js";
import type { GuestVm } from "../guest/guest-vm.js";
import type { AcceleratorChoice, HostFacts, VmResources } from "../host/host-facts.js";
import type { VmMount } from "./mounts.js";

export type { VmMount, VmSecret };

/** What booting needs from a sandbox config (`SandboxConfig` of `@pi-sandbox/config` fits). */
export interface VmSpec {
  /** CPUs and memory. */
  resources: VmResources;
  /** Disk size in GiB (used when the disk is created). */
  diskGiB: number;
  /** Absolute Gondolin assets directory; default: Gondolin's own lookup. Used when the disk is created. */
  image?: string;
  /** Egress policy. */
  network: {
    /** Host patterns the guest may reach over HTTP(S); empty = nothing outbound. */
    allowedHosts: readonly string[];
    /**
     * Host `127.0.0.1` ports the guest reaches over TCP as `host.sandbox.internal:<port>`
     * (`HOST_SERVICES_HOSTNAME`); default none. Unique whole numbers 1-65535, else
     * VM_RESOURCES_UNSUPPORTED.
     */
    hostPorts?: readonly number[];
    /**
     * Credentials by guest environment variable name. The guest's processes see `placeholder`
     * in that variable; the host puts `value` in its place in credential headers (Basic auth
     * included) of HTTPS requests to port 443 of `hosts` (plain HTTP for a host port), refuses
     * requests with the placeholder anywhere else, and turns the value back into the placeholder
     * in every response (README, "Secrets"). Default none.
     */
    secrets?: Readonly<Record<string, VmSecret>>;
  };
  /** Host directories the guest sees read-only (writes fail with EROFS); default none. */
  mounts?: readonly VmMount[];
}

/** A small injected logger; the package never prints. */
export interface VmLogger {
  /** Normal progress. */
  info(message: string): void;
  /** Something slow or degraded the user should know once (e.g. software emulation). */
  warn(message: string): void;
  /** Gondolin/QEMU debug output when `debug` is on. */
  debug?(message: string): void;
}

/** Options of {@link startVm}. */
export interface StartVmOptions {
  /** Identity for logs and Gondolin's session label (e.g. the instance name). */
  name: string;
  /** The instance disk directory (created with {@link DiskStore}). */
  diskDir: string;
  /** Resources and network policy (disk size and image were fixed when the disk was created). */
  spec: Pick<VmSpec, "resources" | "network" | "mounts">;
  /**
   * Directory for this package's runtime files shared by VMs: the QEMU wrapper (`bin/`), per-VM
   * sockets (`run/`), Gondolin's session registry and MITM CA (`gondolin/`).
   */
  stateRoot: string;
  /** Injected logger. */
  logger?: VmLogger;
  /** Told of each egress decision and secret use of the guest (see `EgressEvent`); must not throw or block. */
  onEgress?: (event: EgressEvent) => void;
  /**
   * Asked about each request to a host off `allowedHosts`, which waits for its answer (see
   * `EgressApprover`); absent: such requests are refused at once.
   */
  approveEgress?: EgressApprover;
  /** Cancels the boot (the VM is closed and the run discarded). */
  signal?: AbortSignal;
  /**
   * Extra words for the guest kernel's command line, each `module.name=value` (a lowercase dotted
   * name; a value of letters, digits and `._:-`, at most 128), readable by the guest in
   * /proc/cmdline: how a host tells the guest's init something before any exec (pi-sandbox's
   * supervisor uses `pi_sandbox.agent=KEY`). Any other shape is VM_KERNEL_ARG_INVALID.
   */
  kernelArgs?: readonly string[];
  /** Deadline for the guest to get ready, in ms (default 180000: TCG boots take 10-30 s). */
  startTimeoutMs?: number;
  /** Host facts (default: probed now). */
  host?: HostFacts;
  /** Force an accelerator (default: `PI_SANDBOX_ACCEL`, else chosen from the host). */
  accelerator?: string;
  /** Host patterns allowed to resolve to internal/private addresses (e.g. a host-side test server). */
  allowedInternalHosts?: readonly string[];
  /**
   * Test seam, used only with secrets: a CA (PEM) trusted for HTTPS upstreams besides the
   * system's, and the host port dialled for an HTTPS request to port 443 (a host-side fake API).
   */
  upstream?: { ca?: string; httpsPort?: number };
  /** Forward the guest console and Gondolin protocol debug to `logger.debug`. */
  debug?: boolean;
  /** The disk store to open the disk with (default: a new one). */
  diskStore?: DiskStore;
  /** Live progress for the user (a recovered disk, the KVM check, a fall-back to TCG). */
  onProgress?: (message: string) => void;
  /** How long a KVM boot may take before it is retried on TCG, in ms (default 45000). */
  kvmReadyTimeoutMs?: number;
  /**
   * Test seam: a QEMU that answers the KVM probe instead of the real one, with `/dev/kvm` taken as
   * accessible, to play a host shape (a nested PVM, an abort at reset). The boot itself runs the
   * real QEMU. Default: `PI_SANDBOX_TEST_KVM_PROBE_QEMU`, so tests can set it for a daemon.
   */
  kvmProbeQemuPath?: string;
  /**
   * Test seam: the QEMU machine type to boot instead of the host's choice (e.g. `microvm` under
   * TCG, to check on any host what Linux hosts with KVM get). The accelerator is chosen as ever.
   */
  machineType?: string;
}

/** How a stop went. */
export interface StopResult extends CheckpointResult {
  /** Milliseconds the guest took to sync and freeze its filesystem. */
  syncMs: number;
  /** Milliseconds to close QEMU. */
  closeMs: number;
  /** Total milliseconds. */
  totalMs: number;
}

/** How a live checkpoint went ({@link RunningVm.checkpoint}). */
export interface LiveCheckpointResult {
  /** The current checkpoint generation afterwards (unchanged when `changed` is false). */
  generation: number;
  /** False when the guest wrote nothing to its disk since the last checkpoint: nothing new was published. */
  changed: boolean;
  /** Milliseconds the guest's disk I/O was held while QEMU switched layers (0 when unchanged). */
  stallMs: number;
  /** Milliseconds the guest took to `sync` (the guest runs on meanwhile). */
  syncMs: number;
  /** Milliseconds to make the published layers durable and flip the pointer. */
  commitMs: number;
  /** Total milliseconds. */
  totalMs: number;
  /** Host bytes that became part of the checkpoint (the guest's writes since the last one). */
  bytes: number;
  /** The kept checkpoint, when `keep` asked for one (see `DiskStore.checkpoints`). */
  kept?: KeptCheckpoint;
  /** With `keep.memory`: milliseconds the guest was paused (the last memory pages and the layer switch). */
  pauseMs?: number;
  /** With `keep.memory`: bytes of the saved memory. */
  memoryBytes?: number;
}

/** How a suspend went: the disk checkpoint and the saved memory. */
export interface SuspendResult extends StopResult {
  /** Bytes of the memory file (only touched guest pages are written). */
  memoryBytes: number;
  /** Milliseconds QEMU took to write it. */
  memoryMs: number;
}

/** How `startVm` used a saved memory state (see {@link RunningVm.restore}). */
export type RestoreOutcome =
  /** The guest resumed from memory: processes run on where they were. */
  | { warm: true; restoreMs: number }
  /** The saved memory could not be used; the guest booted cold from the same disk checkpoint. */
  | { warm: false; reason: string };

/** How `RunningVm.close()` leaves the run. */
export interface CloseOptions {
  /**
   * Keep the run's layer (and its record) for the next start, which recovers it as the newest
   * state, crash-consistent like a power cut. For a VM whose QEMU died on its own: closing it
   * otherwise would throw away everything since the last checkpoint.
   */
  keepRun?: boolean;
}

/** A booted VM on an instance disk. `stop()` checkpoints; `close()` discards the run. */
export interface RunningVm extends GuestVm {
  /** The disk directory. */
  readonly diskDir: string;
  /** Accelerator, machine and CPU model in use. */
  readonly accelerator: AcceleratorChoice;
  /** Notes for the user (e.g. software emulation), also sent to `logger.warn`. */
  readonly warnings: readonly string[];
  /** Milliseconds from `startVm` to the guest being ready. */
  readonly bootMs: number;
  /**
   * Set when the disk had a saved memory state (`suspend()`): whether the guest resumed from it or
   * booted cold, and why. Undefined for a plain boot.
   */
  readonly restore: RestoreOutcome | undefined;
  /**
   * Set when the disk's previous run never reached its checkpoint or discard (its controller
   * died, the host lost power): whether that run's writes became the checkpoint this boot
   * started from, or could not be used and were set aside. Also a line in `warnings`. Undefined
   * otherwise.
   */
  readonly recovery: RunRecovery | undefined;
  /**
   * Why the guest cannot answer any more while QEMU still runs, else undefined: `VM_HOST_DISK_FULL`
   * when QEMU paused the guest on a write the full host file system refused. Every guest operation
   * then fails at once with this error; `stop()` resumes and saves if space was freed since.
   */
  readonly fault: VmError | undefined;
  /**
   * Syncs and freezes the guest filesystem, closes QEMU, and makes the disk state current
   * atomically. If the guest cannot confirm the sync (hung, exited), nothing is published: the
   * previous checkpoint stays current and VM_CHECKPOINT_FAILED is thrown; if the host file system
   * is full (the guest is paused on it and no space was freed), VM_HOST_DISK_FULL, likewise with
   * the previous checkpoint current. Single-flight; not cancellable once begun (bounded by
   * `syncTimeoutMs`).
   */
  stop(options?: { syncTimeoutMs?: number }): Promise<StopResult>;
  /**
   * While the guest runs: makes everything it wrote so far a completed checkpoint, so that a
   * crash (even one that leaves the run unusable) loses at most what came after. The guest syncs
   * first (it runs on meanwhile); then QEMU switches its writes to a new layer (`stallMs`: the
   * guest's disk I/O waits for that, tens of ms), and the layer it wrote is published like a
   * stop's (fsync, pointer flip). Nothing written since the last checkpoint: `changed` false,
   * nothing done. The previous checkpoint stays current on any failure, and the VM runs on:
   * `VM_HOST_DISK_FULL` (no room for the new layer or the pointer; also while the guest is
   * paused on a full disk), `VM_CHECKPOINT_LIMIT` (the run already added
   * `LIVE_CHECKPOINT_LAYERS_MAX` layers; the stop merges them), `VM_CHECKPOINT_FAILED` (the
   * guest did not confirm its sync, or QEMU refused). `VM_CLOSED` once stopping or closed.
   * Single-flight; a `stop()`, `suspend()` or `close()` waits for one under way. With `keep`, the
   * checkpoint (new or unchanged) is also kept under an id, to rewind to or fork from (`kept`); a
   * checkpoint under way without `keep` is waited for, then a new one is taken. With
   * `keep.memory`, the guest's memory is kept too, saved while it runs: QEMU pauses it only for
   * the last pages and the layer switch (`pauseMs`), and QEMU runs on (VM_UNSUPPORTED for a VM
   * started without what a suspend records).
   */
  checkpoint(options?: { syncTimeoutMs?: number; keep?: KeepOptions }): Promise<LiveCheckpointResult>;
  /**
   * Milliseconds since the epoch of QEMU's last write to the disk (the active layer's mtime, a
   * `stat`: cheap enough to ask every second); undefined when it cannot be read.
   */
  readonly diskWrittenAtMs: number | undefined;
  /**
   * Replaces a secret's value from now on: for a token refreshed on the host. With `placeholder`
   * (a placeholder shaped like the credential, whose claims changed with it) the guest may send
   * that one too; the earlier placeholders keep working until the VM stops, so a process that read
   * one still gets the new value in. VM_SECRET_INVALID for a name not in the spec, a bad value or
   * a placeholder that overlaps another secret's.
   */
  updateSecret(name: string, value: string, placeholder?: string): void;
  /**
   * Like `stop()`, but keeps the guest's memory: syncs and freezes the guest filesystem, pauses
   * the guest, saves its RAM and device state to a file next to the disk, closes QEMU and takes
   * the disk checkpoint of that same instant. The next `startVm` of the disk resumes from it
   * (processes keep running; the guest filesystem is thawed and the clock set) or, if it cannot,
   * boots that checkpoint cold and says why in `restore`. Crash-safe like `stop()`: until the
   * checkpoint is current the previous one is; a memory file whose checkpoint never became
   * current is ignored. VM_SUSPEND_FAILED when QEMU could not save the memory (the disk is then
   * still checkpointed if the guest synced: `details.diskSaved`); otherwise as `stop()`.
   */
  suspend(options?: { syncTimeoutMs?: number }): Promise<SuspendResult>;
  /**
   * Closes the VM WITHOUT a checkpoint: everything written since start (or since the last live
   * checkpoint) is dropped, unless
   * `keepRun` leaves it for the next start to recover (see {@link CloseOptions}). Idempotent.
   */
  close(options?: CloseOptions): Promise<void>;
  /** Same as `close()`. */
  [Symbol.asyncDispose](): Promise<void>;
}
