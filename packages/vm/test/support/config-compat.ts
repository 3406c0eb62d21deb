// Compile-time check (run by `tsc --noEmit` in lint): a parsed sandbox.yaml can be handed to the
// vm package as is, except for what only the host can resolve at start: `network.secrets` (the
// config names a source, the VM needs the value and a placeholder) and `mounts` (`~/` paths).
import type { SandboxConfig } from "@pi-sandbox/config";
import type { VmSpec } from "../../src/index.js";

export function configAsVmSpec(config: SandboxConfig): VmSpec {
  const {
    mounts: _mounts,
    network: { secrets: _secrets, ...network },
    ...rest
  } = config;
  return { ...rest, network };
}
