// The boot of an entry's VM as the lifecycle's start, create and prepare share it: what the config
// reaches on the host resolved and checked at every start, the boot's progress passed on, and the
// preview gateway opened on the instance's own loopback address.
import { hasPreview, type SandboxConfig } from "@pi-sandbox/config";
import { preloadForwarder } from "@pi-sandbox/ingress";
import type { ProgressEvent } from "../wire.js";
import { assertHostPortsFree, hostPortsOf, portsTakenByInstances } from "./host-ports.js";
import { previewAddressFor } from "./preview-address.js";
import type { InstanceRuntime, RuntimeVm } from "./runtime.js";
import { refuseProtectedReaches, resolveMounts, resolveSecrets } from "./secrets.js";
import type { InstanceState } from "./state.js";

type Progress = (event: ProgressEvent) => void;

/**
 * Boots an entry's disk: host ports, mounts and secrets checked and resolved first (a missing
 * source or a refused mount fails here, before anything boots), then the VM, then the instance's
 * preview gateway (kept when an auto-suspend left it bound).
 */
export async function bootInstanceVm(
  state: InstanceState,
  runtime: InstanceRuntime,
  diskDir: string,
  config: SandboxConfig,
  progress: Progress,
  secretSalt: string,
  freshDisk: boolean,
): Promise<RuntimeVm> {
  await assertHostPortsFree(state.layout, state.name, hostPortsOf(config));
  const previewAddress = state.kind === "instances" ? await previewAddressFor(state.layout, state.name) : undefined;
  if (previewAddress?.shared) {
    state.log.warn(`previews share 127.0.0.1: ${previewAddress.shared}`);
    progress({ stage: "boot", message: `previews share 127.0.0.1: ${previewAddress.shared}` });
  }
  // Read at every start, before anything boots: a missing source or a refused mount fails here.
  const mounts = await resolveMounts(config, { stateRoot: state.layout.root });
  const secrets = await resolveSecrets(config, { salt: secretSalt, stateRoot: state.layout.root });
  await refuseProtectedReaches(config, state.layout.root);
  const names = Object.keys(secrets);
  if (names.length > 0) progress({ stage: "boot", message: `secrets kept on the host: ${names.join(", ")}` });
  progress({ stage: "boot", message: `booting (${config.resources.cpus} cpu, ${config.resources.memoryGiB} GiB)` });
  // The previews' HTTP client loads while the daemon waits for QEMU, not after, as they reopen.
  if (state.kind === "instances" && Object.values(config.services).some(hasPreview)) preloadForwarder();
  const said = new Set<string>();
  const vm = await runtime.bootVm({
    name: state.name,
    diskDir,
    config,
    secrets,
    mounts,
    seedAgent: freshDisk,
    logger: state.log.child("[vm]"),
    onEgress: (event) => state.recordEgress(event),
    // Templates are prepared unattended: only an instance's requests wait for the user.
    ...(state.kind === "instances" ? { approveEgress: (request) => state.egress.decide(request) } : {}),
    onProgress: (message) => {
      said.add(message);
      progress({ stage: "boot", message });
    },
  });
  state.vm = vm;
  // After an auto-suspend the previews are still bound (their requests woke this boot): kept.
  state.gateway ??= previewAddress
    ? runtime.openGateway(state.guestPorts, {
        portsFile: state.layout.portsFile(state.name),
        address: previewAddress.address,
        avoidPorts: () => portsTakenByInstances(state.layout),
        logger: state.log.child("[preview]"),
        wake: () => state.wake(),
      })
    : undefined;
  // A warning the boot already said as progress (a fall-back to TCG, a recovered run) is not repeated.
  for (const warning of vm.warnings) if (!said.has(warning)) progress({ stage: "boot", message: warning });
  progress({ stage: "boot", message: `guest ready in ${(vm.bootMs / 1000).toFixed(1)} s (${vm.accelerator.accel})` });
  // One write for what the boot found: each is an fsync on the way to a warm start's first byte.
  await state.setState("starting", {
    accelerator: vm.accelerator.accel,
    acceleratorReason: vm.accelerator.reason,
    ...(previewAddress ? { previewAddress } : {}),
    ...(vm.restore ? { restore: vm.restore } : {}),
  });
  return vm;
}
