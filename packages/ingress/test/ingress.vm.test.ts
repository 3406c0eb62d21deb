// The same suite as python-guest.test.ts, with the Python fixture inside a real VM, reached
// through GuestVm.connectTcp (Gondolin's virtio ingress channel).
import { readFile } from "node:fs/promises";
import type { GuestExecution } from "@pi-sandbox/vm";
import { guestVmConnector } from "../src/index.js";
import { guestServerSuite } from "./support/guest-suite.js";
import { bootTestVm, type TestVm } from "@pi-sandbox/vm/testing";

const guestPort = 8123;
let testVm: TestVm | undefined;
let server: GuestExecution | undefined;

beforeAll(async () => {
  testVm = await bootTestVm("ingress-vm");
  const script = await readFile(new URL("./support/guest_server.py", import.meta.url));
  // Files first: Gondolin's file operations wait while an exec is running.
  await testVm.vm.writeFile("/tmp/guest_server.py", script);
  server = testVm.vm.exec(["/usr/bin/python3", "/tmp/guest_server.py", String(guestPort)]);
  server.stderr.resume();
  await new Promise<void>((resolve, reject) => {
    let text = "";
    server!.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      text += chunk;
      if (text.includes(`listening ${guestPort}\n`)) resolve();
    });
    server!.result.then(
      (status) => reject(new Error(`guest_server.py exited early: ${JSON.stringify(status)}`)),
      reject,
    );
  });
});

afterAll(async () => {
  // The fixture dies with the VM; its exec then rejects, which is expected here.
  server?.result.catch(() => undefined);
  await testVm?.close();
});

describe("previews into a real VM", () => {
  guestServerSuite(() => ({ connector: guestVmConnector(testVm!.vm), guestPort }), {
    uploadBytes: 10 * 1024 * 1024,
    downloadBytes: 4 * 1024 * 1024,
    lateRead: { bytes: 4 * 1024 * 1024, afterMs: 3_000 },
    concurrent: 20,
    closeWithinMs: 5_000,
  });
});

// The benchmark compares previews with Gondolin's own gateway; check that the two serve the same.
test("Gondolin's bare ingress and a preview serve the same guest answer", async () => {
  const { openGondolinIngress } = await import("@pi-sandbox/vm/testing");
  const { PreviewGateway } = await import("../src/index.js");
  const bare = await openGondolinIngress(testVm!.vm, guestPort);
  const gateway = new PreviewGateway({ connector: guestVmConnector(testVm!.vm) });
  try {
    const preview = await gateway.open({ key: "cmp", guestPort, links: [{ url: "/", title: "cmp" }] });
    const viaBare = await fetch(`${bare.origin}/hello`);
    const viaPreview = await fetch(`${preview.origin}/hello`);
    expect(viaBare.status).toBe(200);
    expect(await viaPreview.text()).toBe(await viaBare.text());
  } finally {
    await gateway.closeAll();
    await bare.close();
  }
});
