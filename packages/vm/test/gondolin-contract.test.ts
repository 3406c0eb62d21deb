// The Gondolin internals this package relies on (src/gondolin-private.ts), checked against the
// installed Gondolin without booting: a Gondolin upgrade that moves any of them fails here, by
// name, instead of as a hang or an obscure error in a real-VM suite.
import fsp from "node:fs/promises";
import net from "node:net";
import path from "node:path";
import { createRequire } from "node:module";
import * as gondolin from "@earendil-works/gondolin";
import { VM } from "@earendil-works/gondolin";
import { egressPolicy } from "../src/egress/egress-policy.js";
import {
  GONDOLIN_ROOT_DRIVE,
  dialMappedTcpOnConnect,
  ingressQueuedBytes,
  ingressServerOf,
  onQemuExit,
  seedVfsInodes,
  vfsInodesOf,
} from "../src/gondolin-private.js";
import { fakeImage, tempDir } from "./support/helpers.js";

let dir: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir, cleanup } = await tempDir("pisb-contract-")));
afterAll(async () => cleanup());

test("the installed Gondolin is the 0.12 line this package was written against", () => {
  const require = createRequire(import.meta.url);
  const pkg = require("@earendil-works/gondolin/package.json") as { version: string };
  expect(pkg.version).toMatch(/^0\.12\./);
});

test("Gondolin names the root disk's QEMU drive as live checkpoints address it", async () => {
  const require = createRequire(import.meta.url);
  const controller = path.join(
    path.dirname(require.resolve("@earendil-works/gondolin/package.json")),
    "dist/src/sandbox/controller.js",
  );
  expect(await fsp.readFile(controller, "utf8")).toContain(`if=none,id=${GONDOLIN_ROOT_DRIVE}`);
});

test("a created (not started) VM exposes the ingress connector, its queue and QEMU's exit event", async () => {
  const vm = await vmWithHostPorts("plain", []);
  try {
    const server = ingressServerOf(vm);
    expect(typeof server.openIngressStream).toBe("function");
    expect(ingressQueuedBytes(server)).toBe(0);
    expect(server.ingressBridge).toBeDefined();
    expect(onQemuExit(vm, () => undefined)).toBe(true);
  } finally {
    await vm.close();
  }
});

test("the file-system service's inode table can be read and seeded (a resumed guest's FUSE mount names files by it)", async () => {
  const vm = await vmWithHostPorts("inodes", []);
  try {
    const table = vfsInodesOf(vm)!;
    expect(table.nextIno).toBeGreaterThanOrEqual(2);
    expect(table.entries).toContainEqual([1, ["/"]]);
    expect(
      seedVfsInodes(vm, {
        nextIno: 9,
        entries: [
          [1, ["/"]],
          [7, ["/etc/gondolin"]],
        ],
      }),
    ).toBe(true);
    expect(vfsInodesOf(vm)).toEqual({
      nextIno: 9,
      entries: [
        [1, ["/"]],
        [7, ["/etc/gondolin"]],
      ],
    });
    const service = (vm as unknown as { server: { fsService: { pathToIno: Map<string, number> } } }).server.fsService;
    expect(service.pathToIno.get("/etc/gondolin")).toBe(7);
  } finally {
    await vm.close();
  }
});

/** A created (not started) VM with the egress policy of `hostPorts` (none: the plain policy). */
async function vmWithHostPorts(name: string, hostPorts: number[]): Promise<VM> {
  const image = await fakeImage(path.join(dir, `${name}-image`));
  const run = path.join(dir, `${name}-run`);
  await fsp.mkdir(run);
  const policy = egressPolicy(gondolin, { allowedHosts: [], hostPorts });
  return VM.create({
    sandbox: {
      imagePath: image,
      qemuPath: "/bin/false",
      virtioSocketPath: path.join(run, "ctl.sock"),
      virtioFsSocketPath: path.join(run, "fs.sock"),
      virtioSshSocketPath: path.join(run, "ssh.sock"),
      virtioIngressSocketPath: path.join(run, "ing.sock"),
      netSocketPath: path.join(run, "net.sock"),
    },
    httpHooks: policy.httpHooks,
    dns: policy.dns,
    ...(policy.tcp ? { tcp: policy.tcp } : {}),
    sessionLabel: "contract test",
  });
}

test("a guest SYN to host.sandbox.internal:<listed port> dials the host at once; other ports and names do not", async () => {
  let accepts = 0;
  const server = net.createServer((socket) => {
    accepts++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  const vm = await vmWithHostPorts("dial", [port]);
  try {
    expect(dialMappedTcpOnConnect(vm)).toBe(true);
    // What the network stack does for a SYN, after the guest resolved the names (Gondolin's DNS).
    const network = (vm as unknown as { server: { network: Record<string, any> } }).server.network; // eslint-disable-line @typescript-eslint/no-explicit-any
    const hostMap = network.syntheticDnsHostMap as { allocate(name: string): string | null };
    const mapped = hostMap.allocate("host.sandbox.internal")!;
    const other = hostMap.allocate("other.sandbox.internal")!;
    const syn = (key: string, dstIP: string, dstPort: number) =>
      network.handleTcpConnect({ key, srcIP: "192.168.127.3", srcPort: 40000, dstIP, dstPort }) as {
        allowRawTcp: boolean;
      };
    expect(syn("unlisted", mapped, port + 1)).toEqual({ allowRawTcp: false });
    expect(syn("other-name", other, port)).toEqual({ allowRawTcp: false });
    expect(syn("gateway", "192.168.127.1", port)).toEqual({ allowRawTcp: false });
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(accepts).toBe(0); // no host socket without a mapping (and none before data, as before)
    expect(syn("listed", mapped, port)).toEqual({ allowRawTcp: true });
    const deadline = Date.now() + 5000;
    while (accepts === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(accepts).toBe(1); // before the guest sent anything
  } finally {
    await vm.close();
    server.close();
  }
});
