// `pi-sandbox init`: the file it writes is a valid, commented sandbox.yaml, and it never overwrites.
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SANDBOX_SCHEMA_ID, loadConfig } from "@pi-sandbox/config";
import { callAction, isControllerError } from "../src/client/index.js";
import { actionFromArgv } from "../src/cli/cli.js";

let dir: string;
let env: NodeJS.ProcessEnv;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "init-"));
  env = { ...process.env, PI_SANDBOX_HOME: join(dir, "state"), XDG_CACHE_HOME: join(dir, "cache") };
});
afterEach(() => rm(dir, { recursive: true, force: true }));

test("init writes a sandbox.yaml that @pi-sandbox/config parses: the image, a previewed service", async () => {
  const result = await callAction({ action: "init" }, { env, cwd: dir });
  expect(result).toEqual({ path: join(dir, "sandbox.yaml"), image: "default", imageBuilt: false });
  const config = await loadConfig(join(dir, "sandbox.yaml"));
  expect(config.image).toBe("default");
  expect(config.services.web?.command).toBe("python3 -m http.server $PORT --bind 127.0.0.1");
  expect(config.services.web?.preview).toBeTruthy();
  const text = await readFile(join(dir, "sandbox.yaml"), "utf8");
  expect(text.split("\n")[0]).toBe(`# yaml-language-server: $schema=${SANDBOX_SCHEMA_ID}`);
  expect(text).toContain("None is built yet: run `pi-sandbox image build` first");
  expect(text).toContain("#   allowedHosts: [");
});

test("--service-command and --port end up in the service, quoted so YAML keeps them as written", async () => {
  const action = await actionFromArgv([
    "init",
    "--service-command",
    "npm run dev -- --port $PORT # x: y",
    "--port",
    "5173",
  ]);
  expect(action).toMatchObject({ kind: "action" });
  await callAction((action as unknown as { action: { action: "init" } }).action, { env, cwd: dir });
  const config = await loadConfig(join(dir, "sandbox.yaml"));
  expect(config.services.web).toMatchObject({ command: "npm run dev -- --port $PORT # x: y", port: 5173 });
});

test("with an image built, init names it and says nothing about building one", async () => {
  const images = join(dir, "cache", "pi-sandbox", "images");
  const build = join(images, "builds", "0123456789abcdef01234567");
  await mkdir(build, { recursive: true });
  for (const file of ["manifest.json", "vmlinuz-virt", "initramfs.cpio.lz4", "rootfs.ext4"]) {
    await writeFile(join(build, file), "{}");
  }
  await mkdir(join(images, "names"));
  await writeFile(join(images, "names", "dev.json"), JSON.stringify({ name: "dev", id: "0123456789abcdef01234567" }));
  // A name whose build is gone is not offered.
  await writeFile(
    join(images, "names", "a-ghost.json"),
    JSON.stringify({ name: "a-ghost", id: "ffffffffffffffffffffffff" }),
  );
  expect(await callAction({ action: "init" }, { env, cwd: dir })).toMatchObject({ image: "dev", imageBuilt: true });
  const text = await readFile(join(dir, "sandbox.yaml"), "utf8");
  expect(text).toContain("image: dev\n");
  expect(text).not.toContain("None is built yet");
});

test("init refuses to overwrite an existing file, with CONTROLLER_FILE_EXISTS and a hint", async () => {
  await writeFile(join(dir, "sandbox.yaml"), "version: 1\n# mine\n");
  try {
    await callAction({ action: "init" }, { env, cwd: dir });
    throw new Error("expected a refusal");
  } catch (error) {
    expect(isControllerError(error) && error.code).toBe("CONTROLLER_FILE_EXISTS");
    expect((error as { hint?: string }).hint).toMatch(/move it away/);
  }
  expect(await readFile(join(dir, "sandbox.yaml"), "utf8")).toBe("version: 1\n# mine\n");
});

test("`image build` on the command line is the image-build action; `image` alone names its subcommands", async () => {
  expect(await actionFromArgv(["image", "build", "dev", "--with", "node,bun", "--size", "4"])).toMatchObject({
    action: { action: "image-build", name: "dev", with: ["node", "bun"], sizeGiB: 4 },
  });
  expect(await actionFromArgv(["help", "image", "rm"])).toMatchObject({ kind: "help", spec: { name: "image-rm" } });
  await expect(actionFromArgv(["image"])).rejects.toThrow("image needs a subcommand: build, list, inspect, rm, import");
  await expect(actionFromArgv(["exec", "demo", "--", "image", "build"])).resolves.toMatchObject({
    action: { action: "exec" },
  });
});
