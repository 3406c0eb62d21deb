// Release check: every publishable package is packed as `npm publish` would pack it (prepack
// builds it and adds the LICENSE), the tarballs are installed into an empty directory with
// third-party dependencies from the registry, and the installed CLI works from there: --version,
// doctor, and a real instance created, reached and destroyed by the daemon that the install
// itself ships. (`pi install` of the packed extension is pi-extension's install.test.ts.)
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { fetchText, makeSandbox, qemuFor, SEED_YAML, teardown, type Sandbox } from "@pi-sandbox/controller/testing";

const run = promisify(execFile);
const ROOT = resolve(import.meta.dirname, "..", "..");
const PACKAGES = ["config", "vm", "supervisor", "ingress", "controller", "pi-extension", "review-setup"];

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
  const review = await run(join(install, "node_modules", ".bin", "pi-sandbox-review-setup"), ["--help"]);
  expect(review.stdout).toMatch(/--name/);
  await sandbox.writeConfig(SEED_YAML);
  const doctor = await cli(["doctor", "-c", "sandbox.yaml"]);
  expect({ code: doctor.code, stderr: doctor.code === 0 ? "" : doctor.stderr }).toEqual({ code: 0, stderr: "" });
  expect(doctor.stdout).toMatch(/^ok +qemu: QEMU emulator version/m);
}, 120_000);

test("the installed CLI creates an instance whose preview serves, then destroys it", async () => {
  const created = await cli(["create", "rel", "-c", "sandbox.yaml", "--json"]);
  expect({ code: created.code, stderr: created.code === 0 ? "" : created.stderr }).toEqual({ code: 0, stderr: "" });
  const result = JSON.parse(created.stdout) as { state: string; previews: { url: string }[] };
  expect(result.state).toBe("running");
  // The daemon that runs it is the installed one, not this checkout's.
  const daemons = (await run("pgrep", ["-af", "--", `--root ${sandbox.home} --kind`])).stdout;
  expect(daemons).toContain(join(install, "node_modules", "@pi-sandbox", "controller", "dist"));
  expect(await fetchText(result.previews[0]!.url)).toBe("200 Hello from the guest\n");
  const destroyed = await cli(["destroy", "rel", "--confirm", "rel"]);
  expect({ code: destroyed.code, stderr: destroyed.code === 0 ? "" : destroyed.stderr }).toEqual({
    code: 0,
    stderr: "",
  });
  expect(qemuFor(sandbox.home)).toEqual([]);
}, 300_000);
