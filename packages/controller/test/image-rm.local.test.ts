// `image rm` of an image an instance boots from: refused with the instance named, unless forced;
// once nothing uses it, removed with its build. Through the real client and an in-process daemon
// over the local runtime (no QEMU), with a stand-in assets directory imported into a temp cache.
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction } from "../src/client/index.js";
import { StateLayout } from "../src/state/layout.js";
import { createLocalRuntime } from "../src/testing.js";
import { inProcessDaemons, type InProcessDaemons } from "./support/in-process-daemon.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- results are loose JSON in tests
type Loose = Record<string, any>;

let dir: string;
let env: NodeJS.ProcessEnv;
let layout: StateLayout;
let daemons: InProcessDaemons;
const savedCache = process.env.XDG_CACHE_HOME;

const call = (action: Loose) => callAction(action, { env, cwd: dir }) as Promise<Loose>;

async function codeOf(promise: Promise<unknown>): Promise<Loose> {
  try {
    await promise;
  } catch (error) {
    return error as Loose;
  }
  throw new Error("expected the call to fail");
}

/** A small assets directory shaped like a build's output (the files' contents are stand-ins). */
async function assetsDir(): Promise<string> {
  const assets = join(dir, "built-elsewhere");
  await mkdir(assets, { recursive: true });
  const files = { kernel: "kernel bytes", initramfs: "initramfs bytes", rootfs: "rootfs bytes" };
  const names = { kernel: "vmlinuz-virt", initramfs: "initramfs.cpio.lz4", rootfs: "rootfs.ext4" };
  const checksums: Record<string, string> = {};
  for (const [role, text] of Object.entries(files)) {
    await writeFile(join(assets, names[role as keyof typeof names]), text);
    checksums[role] = createHash("sha256").update(text).digest("hex");
  }
  await writeFile(
    join(assets, "manifest.json"),
    JSON.stringify({ version: 1, buildId: "b-1", assets: names, checksums }),
  );
  return assets;
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-image-rm-"));
  // The in-process daemon resolves `image: dev` with this process's environment.
  process.env.XDG_CACHE_HOME = join(dir, "cache");
  env = { ...process.env, PI_SANDBOX_HOME: join(dir, "st") };
  layout = new StateLayout(join(dir, "st"));
  await layout.ensurePrivate();
  await call({ action: "image-import", dir: await assetsDir(), name: "dev" });
  await writeFile(join(dir, "sandbox.yaml"), "version: 1\nimage: dev\nprofile: tiny\ndiskGiB: 4\n");
  daemons = inProcessDaemons(layout);
  await daemons.start("web", createLocalRuntime());
  await call({ action: "create", name: "web", config: "sandbox.yaml" });
});

afterAll(async () => {
  await call({ action: "stop", name: "web" }).catch(() => undefined);
  await daemons.exited();
  if (savedCache === undefined) delete process.env.XDG_CACHE_HOME;
  else process.env.XDG_CACHE_HOME = savedCache;
  await rm(dir, { recursive: true, force: true });
});

test("image rm of an image an instance boots from is refused, naming the instance, and removes nothing", async () => {
  const error = await codeOf(call({ action: "image-rm", name: "dev" }));
  expect(error.code).toBe("CONTROLLER_IMAGE_IN_USE");
  expect(error.message).toBe("web boots from image dev");
  expect(error.hint).toMatch(/--force/);
  const listed = await call({ action: "image-list" });
  expect(JSON.stringify(listed)).toContain('"dev"');
});

test("image rm --force removes the name and its build while the instance still names it", async () => {
  const listed = await call({ action: "image-list" });
  const image = (listed.images as Loose[]).find((entry) => entry.name === "dev")!;
  expect(existsSync(image.dir)).toBe(true);
  const removed = await call({ action: "image-rm", name: "dev", force: true });
  expect(removed).toMatchObject({ name: "dev", deleted: true });
  expect(existsSync(image.dir)).toBe(false);
  const error = await codeOf(call({ action: "image-rm", name: "dev" }));
  expect(error.code).toBe("IMAGE_NOT_FOUND");
});
