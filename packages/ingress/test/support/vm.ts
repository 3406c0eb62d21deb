import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DiskStore, startVm, type RunningVm } from "@pi-sandbox/vm";

/** A booted VM on a fresh disk of the test image; `close()` discards the disk. */
export interface TestVm {
  vm: RunningVm;
  close(): Promise<void>;
}

/** Boots the test image (`PI_SANDBOX_TEST_IMAGE`, set by the jest globalSetup) on a throwaway disk. */
export async function bootTestVm(name: string): Promise<TestVm> {
  const image = process.env.PI_SANDBOX_TEST_IMAGE;
  if (!image) throw new Error("PI_SANDBOX_TEST_IMAGE is not set; run these suites with jest.vm.config.cjs");
  // Short path: Gondolin's unix sockets live under the state root (~100-byte limit).
  const dir = await mkdtemp(join(tmpdir(), "pisb-i-"));
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
