// Release check: every publishable package is packed as `npm publish` would pack it (prepack
// builds it and adds the LICENSE), the tarballs are installed into an empty directory with
// third-party dependencies from the registry, and the installed CLI works from there: --version,
// doctor with a config, which parses it and proves the accelerator by booting the image's kernel
// with the installed vm package; and the README's path without this repository: `image build`
// (reusing the test image, which is its default recipe), `init`, `create`, and a preview that
// answers over HTTP. (`pi install` of the packed extension is pi-extension's install.test.ts.)
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { makeSandbox, SEED_YAML, teardown, type Sandbox } from "@pi-sandbox/controller/testing";

const run = promisify(execFile);
const ROOT = resolve(import.meta.dirname, "..", "..");
const PACKAGES = ["config", "vm", "supervisor", "ingress", "image", "controller", "pi-extension"];

interface Packed {
  name: string;
  version: string;
  filename: string;
  files: { path: string }[];
}

let sandbox: Sandbox;
let install: string;
const packed = new Map<string, Packed>();

/** Runs the installed `pi-sandbox` from the install directory; resolves code, stdout, stderr. */
async function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(join(install, "node_modules", ".bin", "pi-sandbox"), args, {
      cwd: sandbox.dir,
      env: sandbox.env,
      timeout: 300_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === "number" ? e.code : -1, stdout: e.stdout ?? "", stderr: e.stderr ?? "" };
  }
}

beforeAll(async () => {
  sandbox = await makeSandbox("psr-");
  install = join(sandbox.dir, "install");
  const tgz = join(sandbox.dir, "tgz");
  await mkdir(tgz);
  for (const dir of PACKAGES) {
    const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", tgz], {
      cwd: join(ROOT, "packages", dir),
      maxBuffer: 64 * 1024 * 1024,
    });
    const [info] = JSON.parse(stdout) as Packed[];
    packed.set(dir, info!);
  }
  // The workspace packages are not on the registry: the install pins every one to its tarball.
  const specs = Object.fromEntries([...packed.values()].map((p) => [p.name, `file:${join(tgz, p.filename)}`]));
  await mkdir(install);
  await writeFile(
    join(install, "package.json"),
    JSON.stringify({ name: "release-check", private: true, dependencies: specs, overrides: specs }, null, 2),
  );
  await run("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline"], {
    cwd: install,
    timeout: 600_000,
    maxBuffer: 64 * 1024 * 1024,
  });
}, 900_000);

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
}, 300_000);

test("every tarball carries its build, LICENSE and README, and nothing from src/ or test/", async () => {
  const license = await readFile(join(ROOT, "LICENSE"), "utf8");
  for (const [dir, info] of packed) {
    const paths = info.files.map((f) => f.path);
    expect({ dir, license: paths.includes("LICENSE"), readme: paths.includes("README.md") }).toEqual({
      dir,
      license: true,
      readme: true,
    });
    expect(paths.filter((p) => /^(src|test|bench)\//.test(p) || p.endsWith(".test.js"))).toEqual([]);
    // Source maps would point at ../../src, which is not shipped.
    expect({ dir, maps: paths.filter((p) => p.endsWith(".map")) }).toEqual({ dir, maps: [] });
    const installed = join(install, "node_modules", info.name);
    expect(await readFile(join(installed, "LICENSE"), "utf8")).toBe(license);
    // Every entry point the package exports exists in the installed copy.
    const manifest = JSON.parse(await readFile(join(installed, "package.json"), "utf8")) as {
      exports: Record<string, string | { default: string; types?: string }>;
      publishConfig?: { access?: string };
    };
    expect(manifest.publishConfig?.access).toBe("public");
    for (const [entry, target] of Object.entries(manifest.exports)) {
      const files = typeof target === "string" ? [target] : [target.default, target.types].filter(Boolean);
      for (const file of files)
        expect({ entry, file, present: existsSync(join(installed, file!)) }).toMatchObject({ present: true });
    }
  }
  expect(
    existsSync(join(install, "node_modules", "@pi-sandbox", "supervisor", "dist", "agent", "sandbox_agent.pyz")),
  ).toBe(true);
});

test("the installed packages load, and the installed CLI answers --version and doctor", async () => {
  for (const info of packed.values()) {
    if (info.name === "@pi-sandbox/pi-extension") continue; // needs Pi as its host: see install.test.ts
    await expect(
      run(process.execPath, ["--input-type=module", "-e", `await import(${JSON.stringify(info.name)})`], {
        cwd: install,
      }),
    ).resolves.toBeDefined();
  }
  const version = await cli(["--version"]);
  expect(version).toEqual({ code: 0, stdout: `pi-sandbox ${packed.get("controller")!.version}\n`, stderr: "" });
  await sandbox.writeConfig(SEED_YAML);
  const doctor = await cli(["doctor", "-c", "sandbox.yaml"]);
  expect({ code: doctor.code, stderr: doctor.code === 0 ? "" : doctor.stderr }).toEqual({ code: 0, stderr: "" });
  expect(doctor.stdout).toMatch(/^ok +qemu: QEMU emulator version/m);
  expect(doctor.stdout).toMatch(/^ok +config: .*sandbox\.yaml is valid$/m);
  // KVM proven by the kernel, or TCG with the reason: either way the probe ran from the install.
  expect(doctor.stdout).toMatch(/^(ok|warn) +accelerator: (kvm|tcg): /m);
  expect(doctor.stdout).toMatch(/^ok +image:python3: python3 present$/m);
}, 120_000);

test("without this repository: image build reuses the test image, init writes a config, create serves a preview", async () => {
  const testImage = process.env.PI_SANDBOX_TEST_IMAGE!;
  // The test image is `image build`'s default recipe under another name, in the same cache.
  const build = await cli(["image", "build"]);
  expect({ code: build.code, stderr: build.code === 0 ? "" : build.stderr }).toEqual({ code: 0, stderr: "" });
  expect(build.stdout).toBe(
    `reused image default (${testImage.split("/").pop()}): ${testImage}\nuse it with \`image: default\` in sandbox.yaml\n`,
  );
  const dir = join(sandbox.dir, "project");
  await mkdir(dir);
  const init = await run(join(install, "node_modules", ".bin", "pi-sandbox"), ["init"], { cwd: dir, env: sandbox.env });
  expect(init.stdout).toMatch(/^wrote .*sandbox\.yaml\nthen: pi-sandbox create NAME -c sandbox\.yaml\n$/);
  const config = join(dir, "sandbox.yaml");
  const text = await readFile(config, "utf8");
  expect(text).toMatch(/^image: default$/m);
  // Only the size changes: this machine runs several VMs at once.
  await writeFile(config, text.replace("profile: small", "profile: tiny"));
  const create = await cli(["create", "release-demo", "-c", config]);
  expect({ code: create.code, stderr: create.code === 0 ? "" : create.stderr }).toEqual({ code: 0, stderr: "" });
  const inspect = await cli(["inspect", "release-demo", "--json"]);
  const url = (JSON.parse(inspect.stdout) as { previews: { url: string }[] }).previews[0]!.url;
  const response = await fetch(url);
  expect({ status: response.status, body: await response.text() }).toEqual({
    status: 200,
    body: "Hello from the guest\n",
  });
  const destroy = await cli(["destroy", "release-demo", "--confirm", "release-demo"]);
  expect(destroy.code).toBe(0);
}, 900_000);
