// Real-VM suites' VM: boots the guest test image on a fresh 4 GiB disk in a short temp directory.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startVm, type RunningVm } from "../boot/boot.js";
import { DiskStore } from "../disk/disk-store.js";

/** A booted VM on a throwaway disk of the test image; `close()` discards disk and state. */
export interface TestVm {
  /** The running guest. */
  vm: RunningVm;
  /** Closes the VM and removes its temporary directory. */
  close(): Promise<void>;
}

/**
 * Boots the guest test image (`PI_SANDBOX_TEST_IMAGE`, set by the workspace's jest globalSetup)
 * on a fresh 4 GiB disk in a short temp dir, for real-VM suites of the layers above.
 */
export async function bootTestVm(name: string, options: { tmpPrefix?: string } = {}): Promise<TestVm> {
  const image = process.env.PI_SANDBOX_TEST_IMAGE;
  if (!image) throw new Error("PI_SANDBOX_TEST_IMAGE is not set; run real-VM suites through jest.test-image.cjs");
  // Short path: Gondolin's unix sockets live under the state root (~100-byte limit).
  const dir = await mkdtemp(join(tmpdir(), options.tmpPrefix ?? "pisb-"));
  const stateRoot = join(dir, "st");
  const diskDir = join(dir, "disk");
  try {
    await new DiskStore({ stateRoot }).createDisk(diskDir, { image, diskGiB: 4 });
    const vm = await startVm({
      name,
      diskDir,
      stateRoot,
      spec: { resources: { cpus: 2, memoryGiB: 1 }, network: { allowedHosts: [] } },
    });
    return {
      vm,
      async close() {
        await vm.close();
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}
