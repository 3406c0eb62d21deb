// Release check: every publishable package is packed as `npm publish` would pack it (prepack
// builds it and adds the LICENSE), the tarballs are installed globally into an empty prefix as
// README's `npm i -g @pi-sandbox/controller` would install them (third-party dependencies from the
// registry), and the installed CLI works from there: --version, doctor with a config, which parses
// it and proves the accelerator by booting the image's kernel with the installed vm package; the
// root README's "Without this repository" block run line by line in an empty directory with a
// fresh state (`image build` reuses the test image, its default recipe), up to a preview that
// answers over HTTP; and every `pi-sandbox` line of the READMEs' sh blocks, run or skipped by a
// listed rule. (`pi install` of the packed extension is pi-extension's install.test.ts.)
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { delimiter, dirname, join } from "node:path";
import { promisify } from "node:util";
import { makeSandbox, SEED_YAML, teardown, type Sandbox } from "@pi-sandbox/controller/testing";
import { codeBlocks, commandLines, ROOT, type CommandLine } from "./support/readme-blocks.js";

const run = promisify(execFile);
const PACKAGES = ["config", "vm", "supervisor", "ingress", "image", "controller", "pi-extension"];

interface Packed {
  name: string;
  version: string;
  filename: string;
  files: { path: string }[];
}

interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

let sandbox: Sandbox;
/** The `npm i -g --prefix` directory: the CLI in bin/, the packages in lib/node_modules/. */
let prefix: string;
const packed = new Map<string, Packed>();

/**
 * A user's environment after the global install: the prefix's bin/ first, then this Node (the
 * CLI's floor is newer than some system Nodes), then the system PATH without any node_modules
 * directory, so the workspace's own `pi-sandbox` cannot answer in place of the installed one.
 */
function userEnv(): NodeJS.ProcessEnv {
  const system = (sandbox.env.PATH ?? "").split(delimiter).filter((dir) => dir && !dir.includes("node_modules"));
  return { ...sandbox.env, PATH: [join(prefix, "bin"), dirname(process.execPath), ...system].join(delimiter) };
}

async function settle(promise: Promise<{ stdout: string; stderr: string }>): Promise<Ran> {
  try {
    return { code: 0, ...(await promise) };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === "number" ? e.code : -1, stdout: e.stdout ?? "", stderr: e.stderr ?? "" };
  }
}

/** Runs the installed `pi-sandbox` in the sandbox directory; resolves code, stdout, stderr. */
async function cli(args: string[]): Promise<Ran> {
  return settle(run("pi-sandbox", args, { cwd: sandbox.dir, env: userEnv(), timeout: 300_000 }));
}

/** Runs one README line, exactly as written, through bash in `cwd` with the user's PATH. */
async function shell(line: string, cwd: string): Promise<Ran> {
  return settle(run("bash", ["-c", line], { cwd, env: userEnv(), timeout: 600_000, maxBuffer: 16 * 1024 * 1024 }));
}

beforeAll(async () => {
  sandbox = await makeSandbox("psr-");
  prefix = join(sandbox.dir, "prefix");
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
  // README's `npm i -g @pi-sandbox/controller`, from the tarballs: the workspace packages are not
  // on the registry, so controller's own ones are named too (each tarball's path in place of its
  // name), and the global install resolves controller's dependencies to them.
  const tarballs = [...packed.values()].map((p) => join(tgz, p.filename));
  await run("npm", ["i", "-g", "--prefix", prefix, "--no-audit", "--no-fund", "--prefer-offline", ...tarballs], {
    cwd: sandbox.dir,
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
    const installed = join(prefix, "lib", "node_modules", info.name);
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
    existsSync(join(prefix, "lib", "node_modules", "@pi-sandbox", "supervisor", "dist", "agent", "sandbox_agent.pyz")),
  ).toBe(true);
});

test("the installed packages load, and the installed CLI answers --version and doctor", async () => {
  for (const info of packed.values()) {
    if (info.name === "@pi-sandbox/pi-extension") continue; // needs Pi as its host: see install.test.ts
    await expect(
      run(process.execPath, ["--input-type=module", "-e", `await import(${JSON.stringify(info.name)})`], {
        cwd: join(prefix, "lib"),
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

test("from an empty directory and a fresh state, the root README's commands without this repository get a preview answering", async () => {
  const block = codeBlocks(["sh"]).find((b) => b.file === "README.md" && b.section === "Without this repository");
  const lines = commandLines(block!).map((l) => l.text.replace(/\s+#.*$/, ""));
  // beforeAll ran this one, with the tarballs in place of the registry's packages.
  expect(lines[0]).toBe("npm i -g @pi-sandbox/controller");
  const testImage = process.env.PI_SANDBOX_TEST_IMAGE!;
  const dir = join(sandbox.dir, "newcomer");
  await mkdir(dir);
  let created: string | undefined;
  let output = "";
  for (const line of lines.slice(1)) {
    // sudo is for debootstrap, which a reused image does not run; it would also drop the test's
    // environment (its fresh state directory) and needs a password where the test is not root.
    const command = line.replace(/^sudo /, "");
    const result = await shell(command, dir);
    expect({ line, code: result.code, stderr: result.code === 0 ? "" : result.stderr }).toEqual({
      line,
      code: 0,
      stderr: "",
    });
    output += result.stdout;
    if (/^pi-sandbox image build$/.test(command))
      // The test image is `image build`'s default recipe under another name, in the same cache.
      expect(result.stdout).toBe(
        `reused image default (${testImage.split("/").pop()}): ${testImage}\nuse it with \`image: default\` in sandbox.yaml\n`,
      );
    if (/^pi-sandbox init$/.test(command)) {
      expect(result.stdout).toMatch(/^wrote .*sandbox\.yaml\nthen: pi-sandbox create NAME -c sandbox\.yaml\n$/);
      const config = join(dir, "sandbox.yaml");
      const text = await readFile(config, "utf8");
      expect(text).toMatch(/^image: default$/m);
      // Only the size changes: this machine runs several VMs at once.
      await writeFile(config, text.replace("profile: small", "profile: tiny"));
    }
    created = /^pi-sandbox create (\S+)/.exec(command)?.[1] ?? created;
  }
  expect(created).toBeDefined();
  // `create` prints the instance's previews; `list` (the tour's next command) shows them too.
  output += (await shell("pi-sandbox list", dir)).stdout;
  const url = /http:\/\/127\.\d+\.\d+\.\d+:\d+\/\S*/.exec(output)?.[0];
  expect(url).toBeDefined();
  const response = await fetch(url!);
  expect({ status: response.status, body: await response.text() }).toEqual({
    status: 200,
    body: "Hello from the guest\n",
  });
  const destroy = await shell(`pi-sandbox destroy ${created!} --confirm ${created!}`, dir);
  expect(destroy.code).toBe(0);
}, 900_000);

/**
 * What the README-commands test does with each `pi-sandbox` command of a sh block (the parts of a
 * line joined by `&&`). A command no rule matches fails the test: `npx pi-sandbox …`, say, which
 * outside this checkout runs an unrelated package.
 */
const COMMAND_RULES: { pattern: RegExp; skip?: string }[] = [
  { pattern: /^pi-sandbox (--help|help|--version|list|image list|completion (bash|zsh))$/ },
  { pattern: /^pi-sandbox [a-z-]+( [a-z-]+)? --help$/ },
  { pattern: /^pi-sandbox doctor$/ },
  { pattern: /^pi-sandbox init( .*)?$/ },
  { pattern: /^pi-sandbox call '\{"action":"help"\}'$/ },
  {
    pattern: /^npm i(nstall)? -g @pi-sandbox\/controller$/,
    skip: "what beforeAll runs, from the tarballs (the package is not yet on the registry)",
  },
  {
    pattern: /^(sudo )?pi-sandbox image build( .*)?$/,
    skip: "builds a Debian image (root, the network, minutes); the newcomer test runs the plain form, which reuses the test image",
  },
  {
    pattern: /^pi-sandbox image (inspect|rm|import) /,
    skip: "names an image or a directory this install does not have",
  },
  {
    pattern: /^pi-sandbox dashboard( --stop)?$/,
    skip: "starts a background web server; dashboard.test.ts drives it in a browser",
  },
  { pattern: /^pi-sandbox ls --context local$/ },
  {
    pattern: /^pi-sandbox context (add|ls|use|rm)( .*)?$/,
    skip: "names another machine reached over ssh: context-ssh.test.ts sets one up and drives it",
  },
  {
    pattern: /^pi-sandbox doctor .*-c /,
    skip: "needs a config naming a built image and boots its kernel: the --version and doctor test runs it",
  },
  {
    pattern:
      /^pi-sandbox (create|start|stop|suspend|exec|exec-status|exec-kill|shell|cp|logs|prepare|destroy|secrets|inspect|read|write|services|preview|fork|checkpoint|checkpoints|rewind|diff|apply|audit|egress) /,
    skip: "needs a VM or an existing instance: the newcomer test runs create, list and destroy",
  },
];

/** The parts of a line that run `pi-sandbox` or install it (a trailing comment removed). */
function commands(line: CommandLine): string[] {
  return line.text
    .replace(/\s+#\s.*$/, "")
    .split("&&")
    .map((part) => part.trim())
    .filter((part) => /(?<![@/\w-])pi-sandbox(?![/\w-])/.test(part) || /^npm (i|install) -g @pi-sandbox\//.test(part));
}

test("every pi-sandbox command in the READMEs' sh blocks works from the installed tarballs, or a listed rule says why it is skipped", async () => {
  const unmatched: string[] = [];
  const failed: unknown[] = [];
  const ran: string[] = [];
  let blockIndex = 0;
  for (const block of codeBlocks(["sh", "bash", "shell"])) {
    const dir = join(sandbox.dir, `readme-${(blockIndex += 1)}`);
    await mkdir(dir);
    for (const line of commandLines(block)) {
      const parts = commands(line);
      if (parts.length === 0) continue;
      const rules = parts.map((part) => COMMAND_RULES.find((r) => r.pattern.test(part)));
      parts.forEach((part, i) => rules[i] === undefined && unmatched.push(`${line.where}: ${part}`));
      if (rules.some((r) => r === undefined)) continue;
      if (rules.every((r) => !r!.skip)) {
        const result = await shell(line.text, dir);
        ran.push(line.text);
        if (result.code !== 0 || result.stdout.trim() === "")
          failed.push({ where: line.where, line: line.text, code: result.code, stderr: result.stderr });
        continue;
      }
      // A skipped command still has to exist in the installed CLI (not its help's wording: that changes).
      for (const part of parts.filter((p) => p.includes("pi-sandbox ") && !p.startsWith("npm "))) {
        const words = part
          .replace(/^sudo /, "")
          .split(/\s+/)
          .slice(1);
        const command = ["image", "context"].includes(words[0]!) ? words.slice(0, 2) : words.slice(0, 1);
        const result = await cli([...command, "--help"]);
        if (result.code !== 0 || result.stdout.trim() === "")
          failed.push({ where: line.where, help: command.join(" "), code: result.code, stderr: result.stderr });
      }
    }
  }
  expect(unmatched).toEqual([]);
  expect(failed).toEqual([]);
  // The tour's init, image list, list and call, and the image README's image list at least.
  expect(ran.length).toBeGreaterThanOrEqual(5);
  // Inside this checkout, the README's `npx pi-sandbox` runs the workspace's own copy.
  const npx = await settle(run("npx", ["pi-sandbox", "--version"], { cwd: ROOT }));
  expect(npx).toEqual({ code: 0, stdout: `pi-sandbox ${packed.get("controller")!.version}\n`, stderr: "" });
}, 300_000);
