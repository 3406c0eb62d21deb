// Compile-time check (run by `tsc --noEmit` in lint): a parsed sandbox.yaml can be handed to the
// vm package as is — `SandboxConfig` must stay assignable to `VmSpec`.
import type { SandboxConfig } from "@pi-sandbox/config";
import type { VmSpec } from "../src/index.js";

export function configAsVmSpec(config: SandboxConfig): VmSpec {
  return config;
}
