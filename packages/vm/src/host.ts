// `@pi-sandbox/vm/host`, which never loads Gondolin: the host's facts, the accelerator choice and
// resource checks (host/host-facts.ts), and what doctor, inspect and the controller's liveness
// checks read of the host.
export {
  probeHost,
  chooseAccelerator,
  resolveAccelerator,
  recordKvmFailure,
  checkResources,
  checkDiskSize,
  qemuArchOf,
  qemuMemory,
  findExecutable,
  MAX_DISK_GIB,
  MIN_MEMORY_GIB,
  type Accelerator,
  type AcceleratorChoice,
  type HostFacts,
  type ResolveAcceleratorOptions,
  type ResolvedAccelerator,
  type VmResources,
} from "./host/host-facts.js";

// Doctor finds an image's kernel to prove KVM with; image.ts loads Gondolin only when asked to.
export { loadImageDir, type GuestImage, type ImageCheckOptions } from "./image/image.js";
export { probeKvmKernel, type KvmVerdict } from "./host/kvm-probe.js";
// Kept checkpoints are listed from their records (`pi-sandbox checkpoints`) without the VM machinery.
export { listKept, type KeptCheckpointInfo } from "./disk/kept-checkpoints.js";
// The controller checks its daemon's pid with the same /proc reader (a zombie is gone).
export { pidAlive, isAlive, selfIdentity, type ProcessIdentity } from "./process-util.js";
// Inspect and list report what a running instance's QEMU costs (CPU, resident memory) from /proc.
export {
  processUsage,
  qemuUsage,
  qemuResidentMemory,
  residentMemoryOf,
  cpuPercent,
  type ProcessUsage,
  type QemuResidentMemory,
} from "./host/process-usage.js";
