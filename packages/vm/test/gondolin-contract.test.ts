// The Gondolin internals this package relies on (src/gondolin-private.ts), checked against the
// installed Gondolin without booting: a Gondolin upgrade that moves any of them fails here, by
// name, instead of as a hang or an obscure error in a real-VM suite.
import fsp from "node:fs/promises";
import path from "node:path";
import { createRequire } from "node:module";
import { VM } from "@earendil-works/gondolin";
import { ingressQueuedBytes, ingressServerOf, onQemuExit } from "../src/gondolin-private.js";
import { fakeImage, tempDir } from "./helpers.js";

let dir: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir, cleanup } = await tempDir("pisb-contract-")));
afterAll(async () => cleanup());

test("the installed Gondolin is the 0.12 line this package was written against", () => {
  const require = createRequire(import.meta.url);
  const pkg = require("@earendil-works/gondolin/package.json") as { version: string };
  expect(pkg.version).toMatch(/^0\.12\./);
});

test("a created (not started) VM exposes the ingress connector, its queue and QEMU's exit event", async () => {
  const image = await fakeImage(path.join(dir, "image"));
  const run = path.join(dir, "run");
  await fsp.mkdir(run);
  const vm = await VM.create({
    sandbox: {
      imagePath: image,
      qemuPath: "/bin/false",
      virtioSocketPath: path.join(run, "ctl.sock"),
      virtioFsSocketPath: path.join(run, "fs.sock"),
      virtioSshSocketPath: path.join(run, "ssh.sock"),
      virtioIngressSocketPath: path.join(run, "ing.sock"),
      netSocketPath: path.join(run, "net.sock"),
    },
    sessionLabel: "contract test",
  });
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
