// Public API of @pi-sandbox/vm: everything not listed here is private. Only this package imports
// Gondolin; the layers above reach VMs, disks and images through these names.

// Booting
export {
  startVm,
  mapStartError,
  type StartVmOptions,
  type RunningVm,
  type StopResult,
  type SuspendResult,
  type LiveCheckpointResult,
  type RestoreOutcome,
  type CloseOptions,
  type VmSpec,
  type VmSecret,
  type VmMount,
  type VmLogger,
} from "./boot/boot.js";
export type { UpstreamOverrides } from "./egress/upstream-dispatchers.js";
export type { EgressBytes } from "./egress/counting-fetch.js";
export { isHostAllowed } from "./egress/host-patterns.js";
export type {
  EgressApprovalRule,
  EgressApprover,
  EgressEvent,
  EgressRequest,
  EgressVerdict,
} from "./egress/egress-policy.js";

// The guest interface for upper layers
export type {
  GuestVm,
  GuestExecOptions,
  GuestExecution,
  GuestExitStatus,
  GuestRunResult,
  GuestSshAccess,
  GuestSshOptions,
  TransferDisk,
} from "./guest/guest-vm.js";
export { runInGuest } from "./guest/exec-util.js";

// Disks: instances, templates, checkpoints
export {
  DiskStore,
  directoryAllocatedBytes,
  type DiskInfo,
  type DiskKind,
  type DiskPointer,
  type DiskRun,
  type CheckpointResult,
  type LiveDiskCheckpoint,
  type RunRecovery,
  type SetAsideLayer,
  type KeepOptions,
  type KeptCheckpoint,
  type KeptCheckpointInfo,
  recoveryNotice,
  LIVE_CHECKPOINT_LAYERS_MAX,
} from "./disk/disk-store.js";
export { LayerSwitchRefused, type LayerSwitch } from "./disk/disk-layout.js";
export {
  POINTER_FILE,
  LOCK_FILE,
  SUSPEND_STATE_FILE,
  MEMORY_FILE,
  QEMU_PID_FILE,
  RUN_RECORD_FILE,
  SET_ASIDE_DIR,
} from "./filenames.js";
export {
  QemuImg,
  mapQemuFailure,
  type QemuCheckResult,
  type QemuImageInfo,
  type QemuImgRunner,
} from "./disk/qemu-img.js";

// Images
export {
  resolveImage,
  loadImageDir,
  type GuestImage,
  type ImageCheckOptions,
  type RecordedImage,
} from "./image/image.js";

// Host: accelerator and resources
export {
  probeHost,
  chooseAccelerator,
  resolveAccelerator,
  recordKvmFailure,
  checkResources,
  checkDiskSize,
  MAX_DISK_GIB,
  MIN_MEMORY_GIB,
  type Accelerator,
  type AcceleratorChoice,
  type HostFacts,
  type ResolveAcceleratorOptions,
  type ResolvedAccelerator,
  type VmResources,
} from "./host/host-facts.js";
export {
  probeKvmKernel,
  KvmVerdictCache,
  type KvmKernelProbeOptions,
  type KvmVerdict,
  type KvmVerdictKey,
} from "./host/kvm-probe.js";

// QEMU process hygiene
export { prepareQemuLauncher, type QemuLauncher } from "./host/qemu-process.js";
export { TRANSFER_DISK_BYTES, TRANSFER_DISK_SERIAL } from "./host/transfer-disk.js";
export { reapStrayQemu, type ReapResult } from "./disk/disk-lock.js";

// Errors
export { VmError, isVmError, type VmErrorCode, type VmErrorOptions } from "./errors.js";
