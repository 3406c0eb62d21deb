// Each instance's previews get a loopback address of their own (so a browser gives them a cookie
// jar of their own), unique on the state root, kept with the instance; and a new preview port
// stays clear of every instance's leases and host ports.
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConfig } from "@pi-sandbox/config";
import { JsonFilePortLeaseStore } from "@pi-sandbox/ingress";
import { StateLayout } from "../src/client/index.js";
import { portsTakenByInstances } from "../src/daemon/host-ports.js";
import {
  previewAddressFor,
  randomPreviewAddress,
  recordedPreviewAddress,
  releasePreviewAddress,
} from "../src/daemon/preview-address.js";
import { writeRecord } from "../src/state/records.js";

let base: string;
let layout: StateLayout;

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), "ctl-addr-"));
  layout = new StateLayout(join(base, "state"));
  await layout.ensurePrivate();
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

async function instance(name: string, hostPorts: number[] = []): Promise<void> {
  await mkdir(layout.entryDir("instances", name), { recursive: true });
  const network = hostPorts.length > 0 ? `network:\n  hostPorts: [${hostPorts.join(", ")}]\n` : "";
  const config = parseConfig(`version: 1\n${network}`);
  await writeRecord(layout, { kind: "instances", name, createdAt: "2026-01-01T00:00:00.000Z", config });
}

/** Candidates from a short fixed list, round and round: forces collisions between instances. */
function cycling(addresses: string[]): () => string {
  let next = 0;
  return () => addresses[next++ % addresses.length]!;
}

const bindsAll = async () => true;

describe("preview addresses", () => {
  test("instances created at once all get different addresses, none of them 127.0.0.1", async () => {
    const names = Array.from({ length: 12 }, (_, i) => `box-${i}`);
    await Promise.all(names.map((name) => instance(name)));
    const pool = Array.from({ length: 12 }, (_, i) => `127.9.9.${i + 1}`);
    // Every instance starts at the same candidate: only the exclusive claims keep them apart.
    const got = await Promise.all(
      names.map((name) =>
        previewAddressFor(layout, name, { canBind: bindsAll, candidate: cycling(["127.0.0.1", ...pool]) }),
      ),
    );
    const addresses = got.map((g) => g.address);
    expect(new Set(addresses).size).toBe(names.length);
    expect(addresses).not.toContain("127.0.0.1");
    expect(got.every((g) => g.shared === undefined)).toBe(true);
    expect((await readdir(layout.addressesDir())).sort()).toEqual([...addresses].sort());
  });

  test("random candidates stay clear of 127.0.x.x and of the ends of the range", () => {
    for (let i = 0; i < 2000; i++) {
      const [, b, c, d] = randomPreviewAddress().split(".").map(Number);
      expect(b).toBeGreaterThanOrEqual(1);
      expect(b).toBeLessThanOrEqual(254);
      expect(c).toBeGreaterThanOrEqual(0);
      expect(c).toBeLessThanOrEqual(255);
      expect(d).toBeGreaterThanOrEqual(1);
      expect(d).toBeLessThanOrEqual(254);
    }
  });

  test("an instance keeps its address on every later start, recorded in its ports.json", async () => {
    await instance("demo");
    const first = await previewAddressFor(layout, "demo");
    expect(first.address).toMatch(/^127\.(?!0\.)\d+\.\d+\.\d+$/);
    const again = await previewAddressFor(layout, "demo", { candidate: () => "127.200.200.200", canBind: bindsAll });
    expect(again).toEqual(first);
    const ports = JSON.parse(await readFile(layout.portsFile("demo"), "utf8"));
    expect(ports.address).toBe(first.address);
  });

  test("an older ports.json without an address keeps its leases and gets an address on the next start", async () => {
    await instance("old");
    await writeFile(layout.portsFile("old"), JSON.stringify({ version: 1, leases: { web: 41000 } }));
    const got = await previewAddressFor(layout, "old", { canBind: bindsAll, candidate: () => "127.3.4.5" });
    expect(got).toEqual({ address: "127.3.4.5" });
    expect(JSON.parse(await readFile(layout.portsFile("old"), "utf8"))).toEqual({
      version: 1,
      address: "127.3.4.5",
      leases: { web: 41000 },
    });
  });

  test("a start that crashed after claiming but before recording gets the same address back", async () => {
    await instance("demo");
    await mkdir(layout.addressesDir(), { recursive: true });
    await writeFile(layout.addressClaimFile("127.7.7.7"), "demo\n");
    const got = await previewAddressFor(layout, "demo", { canBind: bindsAll, candidate: () => "127.8.8.8" });
    expect(got.address).toBe("127.7.7.7");
    expect(await readdir(layout.addressesDir())).toEqual(["127.7.7.7"]);
  });

  test("a recorded address that another instance holds is not shared: the instance gets a new one", async () => {
    await instance("a");
    await instance("b");
    await previewAddressFor(layout, "a", { canBind: bindsAll, candidate: () => "127.5.5.5" });
    await new JsonFilePortLeaseStore(layout.portsFile("b")).setAddress("127.5.5.5");
    const b = await previewAddressFor(layout, "b", {
      canBind: bindsAll,
      candidate: cycling(["127.5.5.5", "127.6.6.6"]),
    });
    expect(b.address).toBe("127.6.6.6");
  });

  test("destroy releases the address, and the next instance may take it", async () => {
    await instance("gone");
    await instance("next");
    const { address } = await previewAddressFor(layout, "gone", { canBind: bindsAll, candidate: () => "127.4.4.4" });
    const recorded = await recordedPreviewAddress(layout, "gone");
    expect(recorded).toBe(address);
    await rm(layout.entryDir("instances", "gone"), { recursive: true });
    await releasePreviewAddress(layout, "gone", recorded);
    expect(await readdir(layout.addressesDir())).toEqual([]);
    expect((await previewAddressFor(layout, "next", { canBind: bindsAll, candidate: () => "127.4.4.4" })).address).toBe(
      "127.4.4.4",
    );
  });

  test("releasing never removes a claim that names another instance", async () => {
    await instance("mine");
    await previewAddressFor(layout, "mine", { canBind: bindsAll, candidate: () => "127.4.4.4" });
    await releasePreviewAddress(layout, "someone-else", "127.4.4.4");
    expect(await readdir(layout.addressesDir())).toEqual(["127.4.4.4"]);
  });

  test("where the host cannot bind other loopback addresses (macOS), previews use 127.0.0.1 and say why", async () => {
    await instance("mac");
    const got = await previewAddressFor(layout, "mac", { canBind: async () => false });
    expect(got.address).toBe("127.0.0.1");
    expect(got.shared).toMatch(/only 127\.0\.0\.1 .*share its cookies with the host's other localhost apps/);
    expect(await readdir(layout.addressesDir())).toEqual([]);
    expect(await new JsonFilePortLeaseStore(layout.portsFile("mac")).address()).toBeUndefined();
  });

  (process.platform === "linux" ? test : test.skip)(
    "on Linux, a fresh address is really bindable on this host",
    async () => {
      await instance("real");
      const got = await previewAddressFor(layout, "real");
      expect(got.shared).toBeUndefined();
      expect(got.address).not.toBe("127.0.0.1");
    },
  );
});

describe("ports a new preview avoids", () => {
  test("are every instance's preview leases and every instance's network.hostPorts", async () => {
    await instance("a", [5432]);
    await instance("b", [8000, 11434]);
    await instance("c");
    await new JsonFilePortLeaseStore(layout.portsFile("a")).set("web", 41000);
    await new JsonFilePortLeaseStore(layout.portsFile("c")).set("api", 42000);
    expect([...(await portsTakenByInstances(layout))].sort((x, y) => x - y)).toEqual([5432, 8000, 11434, 41000, 42000]);
  });

  test("an unreadable ports.json is skipped, not fatal", async () => {
    await instance("broken", [9000]);
    await writeFile(layout.portsFile("broken"), "{ not json");
    expect([...(await portsTakenByInstances(layout))]).toEqual([9000]);
  });
});
