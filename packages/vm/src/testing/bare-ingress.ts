// Gondolin's built-in ingress gateway opened bare, for benchmarks that compare it with the
// product's previews (which use connectTcp).
import { gondolinVmOf, type RunningVm } from "../boot/boot.js";
import { VmError } from "../errors.js";

/** Gondolin's own ingress gateway in front of one guest port. */
export interface BareIngress {
  /** `http://127.0.0.1:<port>` of Gondolin's gateway. */
  readonly origin: string;
  /** Closes the gateway. */
  close(): Promise<void>;
}

/**
 * Opens Gondolin's built-in ingress gateway (one host port, routed to `guestPort`) on a VM from
 * `startVm`, with the same dev-server-friendly timeouts previews use. For benchmarks that compare
 * the product's previews with Gondolin's bare ingress; the product itself uses `connectTcp`.
 */
export async function openGondolinIngress(vm: RunningVm, guestPort: number): Promise<BareIngress> {
  const gondolin = gondolinVmOf(vm);
  if (!gondolin) {
    throw new VmError("VM_UNSUPPORTED", "openGondolinIngress needs a VM started with startVm", {
      details: { name: vm.name },
    });
  }
  gondolin.setIngressRoutes([{ prefix: "/", port: guestPort, stripPrefix: false }]);
  const access = await gondolin.enableIngress({
    listenHost: "127.0.0.1",
    listenPort: 0,
    upstreamHeaderTimeoutMs: 120_000,
    upstreamResponseTimeoutMs: 600_000,
  });
  return { origin: access.url.replace(/\/$/, ""), close: () => access.close() };
}
