// The seccomp probe (a QEMU started with the sandbox on and told to quit) runs once per host boot
// and QEMU binary when a cache directory is given, not at every controller's start; an
// inconclusive probe is not kept, and another binary is probed anew. Played by fake QEMUs.
import fsp from "node:fs/promises";
import path from "node:path";
import { forgetSeccompProbes, probeQemuSeccomp } from "../src/host/qemu-seccomp.js";
import { tempDir } from "./support/helpers.js";

let dir: string;
let cleanup: () => Promise<void>;

beforeEach(async () => {
  ({ dir, cleanup } = await tempDir("pisb-seccomp-"));
  forgetSeccompProbes();
});
afterEach(async () => cleanup());

/** A fake QEMU that appends a line to its `.calls` file each run, then runs `body`. */
async function fakeQemu(name: string, body: string): Promise<{ file: string; runs: () => Promise<number> }> {
  const file = path.join(dir, name);
  const calls = `${file}.calls`;
  await fsp.writeFile(file, `#!/bin/sh\necho run >> '${calls}'\n${body}\n`, { mode: 0o755 });
  const runs = async () => (await fsp.readFile(calls, "utf8").catch(() => "")).split("\n").filter(Boolean).length;
  return { file, runs };
}

test("a conclusive answer is kept in the cache directory: the next controller does not start QEMU again", async () => {
  const cacheDir = path.join(dir, "bin");
  await fsp.mkdir(cacheDir);
  const qemu = await fakeQemu("qemu-ok", "cat > /dev/null; exit 0");
  expect(await probeQemuSeccomp(qemu.file, { cacheDir })).toEqual({ supported: true });
  forgetSeccompProbes();
  expect(await probeQemuSeccomp(qemu.file, { cacheDir })).toEqual({ supported: true });
  expect(await qemu.runs()).toBe(1);

  const refusing = await fakeQemu(
    "qemu-no-sandbox",
    "echo \"qemu: -sandbox on: There is no option group 'sandbox'\" >&2; exit 1",
  );
  const first = await probeQemuSeccomp(refusing.file, { cacheDir });
  expect(first).toMatchObject({ supported: false, problem: expect.stringContaining("no option group") });
  forgetSeccompProbes();
  expect(await probeQemuSeccomp(refusing.file, { cacheDir })).toEqual(first);
  expect(await refusing.runs()).toBe(1);
});

test("without a cache directory, each process probes once; a changed binary is probed anew", async () => {
  const qemu = await fakeQemu("qemu-plain", "cat > /dev/null; exit 0");
  await probeQemuSeccomp(qemu.file);
  await probeQemuSeccomp(qemu.file);
  expect(await qemu.runs()).toBe(1);
  forgetSeccompProbes();
  await probeQemuSeccomp(qemu.file);
  expect(await qemu.runs()).toBe(2);

  const cacheDir = path.join(dir, "bin");
  await fsp.mkdir(cacheDir);
  forgetSeccompProbes();
  await probeQemuSeccomp(qemu.file, { cacheDir });
  expect(await qemu.runs()).toBe(3);
  await fsp.appendFile(qemu.file, "# upgraded\n");
  forgetSeccompProbes();
  await probeQemuSeccomp(qemu.file, { cacheDir });
  expect(await qemu.runs()).toBe(4);
});
