// upload and download (`pi-sandbox cp`) without QEMU: a host tree into the local "guest" and back
// through the daemon, sha256-checked file by file, links skipped. The real thing: cli-files.vm.test.ts.
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { StateLayout } from "../src/client/index.js";
import { createLocalRuntime, type LocalRuntime } from "../src/testing.js";
import { localDaemons, type LocalDaemons } from "./support/local-daemon.js";

let dir: string;
let runtime: LocalRuntime;
let daemons: LocalDaemons;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-cp-"));
  const layout = new StateLayout(join(dir, "state"));
  await layout.ensurePrivate();
  runtime = createLocalRuntime();
  daemons = localDaemons(layout, runtime);
  await writeFile(join(dir, "sandbox.yaml"), "version: 1\nprofile: tiny\ndiskGiB: 4\n");
  await daemons.call({ action: "create", name: "cp", config: join(dir, "sandbox.yaml") });
});

afterAll(async () => {
  await daemons.close();
  for (const vm of [...runtime.live]) await vm.close();
  await rm(dir, { recursive: true, force: true });
});

test("a directory goes up and comes back whole; one file reports its sha256; links are skipped", async () => {
  const src = join(dir, "tree");
  await mkdir(join(src, "sub", "deep"), { recursive: true });
  const big = Buffer.alloc(3 * 1024 * 1024 + 7, 0x61);
  await writeFile(join(src, "a.txt"), "alpha\n");
  await writeFile(join(src, "sub", "deep", "big.bin"), big);
  await symlink("/etc/passwd", join(src, "link"));

  const up = await daemons.call({ action: "upload", name: "cp", from: [src], to: "." });
  expect(up).toMatchObject({
    direction: "upload",
    to: expect.stringMatching(/\/workspace$/),
    files: 2,
    directories: 3,
    bytes: big.length + 6,
  });
  expect(up.skipped).toEqual([{ path: "link", type: "symlink" }]);

  const back = join(dir, "back");
  await mkdir(back);
  const down = await daemons.call({ action: "download", name: "cp", from: ["tree"], to: back });
  expect(down).toMatchObject({ direction: "download", files: 2, directories: 3, bytes: big.length + 6 });
  expect(await readFile(join(back, "tree", "a.txt"), "utf8")).toBe("alpha\n");
  expect((await readFile(join(back, "tree", "sub", "deep", "big.bin"))).equals(big)).toBe(true);
  await expect(stat(join(back, "tree", "link"))).rejects.toMatchObject({ code: "ENOENT" });

  const one = await daemons.call({ action: "download", name: "cp", from: ["tree/a.txt"], to: join(dir, "a.copy") });
  expect(one.sha256).toBe(createHash("sha256").update("alpha\n").digest("hex"));
  await expect(
    daemons.call({ action: "upload", name: "cp", from: [join(src, "a.txt"), join(src, "sub")], to: "a.txt" }),
  ).rejects.toMatchObject({
    code: "CONTROLLER_BAD_INPUT",
    message: expect.stringMatching(/not an existing directory/),
  });
});
