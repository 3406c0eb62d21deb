// Our changes to Gondolin's rootfs /init (builder/rootfs.mjs) against the Gondolin this workspace
// installs: each applies, the result is valid sh, and the MITM CA step rebuilds the system bundle
// only when this boot's CA is not already in it. The CA step runs here as a shell function over a
// temporary tree, with the script's paths pointed into it.
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { gondolinInitScripts, rootfsInit } from "../builder/index.mjs";

const run = promisify(execFile);
let script: string;
let root: string;

beforeAll(async () => {
  script = rootfsInit((await gondolinInitScripts()).rootfs);
  root = await mkdtemp(path.join(tmpdir(), "pisb-init-"));
});

afterAll(() => rm(root, { recursive: true, force: true }));

test("the changed /init is valid sh", async () => {
  const file = path.join(root, "init");
  await writeFile(file, script);
  await expect(run("sh", ["-n", file])).resolves.toBeDefined();
});

/** The script's functions (everything before its first mount), with absolute paths moved under `root`. */
function functionsUnder(dir: string): string {
  const functions = script.slice(0, script.indexOf("mount -t proc proc /proc"));
  return functions.replace(/\/(etc|usr|run)\//g, `${dir}/$1/`).replace(/set -eu\n/, "set -eu\nCONSOLE=\n");
}

test("setup_mitm_ca rebuilds the bundle for a new CA and leaves it alone when it already holds that CA", async () => {
  const dir = path.join(root, "ca");
  await mkdir(path.join(dir, "etc/gondolin/mitm"), { recursive: true });
  await mkdir(path.join(dir, "etc/ssl/certs"), { recursive: true });
  await mkdir(path.join(dir, "usr/share/ca-certificates/mozilla"), { recursive: true });
  await writeFile(path.join(dir, "usr/share/ca-certificates/mozilla/A.crt"), "SYSTEM-A\n");
  await writeFile(path.join(dir, "etc/ca-certificates.conf"), "# comment\nmozilla/A.crt\n");
  // The Debian tool only has to exist; the script runs its own few-process equivalent.
  const bin = path.join(dir, "bin");
  await mkdir(bin);
  await writeFile(path.join(bin, "update-ca-certificates"), "#!/bin/sh\nexit 0\n", { mode: 0o755 });
  const boot = async (ca: string) => {
    await writeFile(path.join(dir, "etc/gondolin/mitm/ca.crt"), ca);
    const body = `${functionsUnder(dir)}\nsetup_mitm_ca\nprintf '%s' "$SSL_CERT_FILE"`;
    const { stdout } = await run("sh", ["-c", body], { env: { PATH: `${bin}:${process.env.PATH}` } });
    return stdout;
  };
  const bundle = path.join(dir, "etc/ssl/certs/ca-certificates.crt");

  expect(await boot("CA-ONE\n")).toBe(path.join(dir, "run/gondolin/ca-certificates.crt"));
  expect(await readFile(bundle, "utf8")).toBe("SYSTEM-A\nCA-ONE\n\n");
  const first = (await stat(bundle)).mtimeMs;

  // The same disk boots again with the same CA: the bundle is not rewritten.
  await boot("CA-ONE\n");
  expect((await stat(bundle)).mtimeMs).toBe(first);
  expect(await readFile(path.join(dir, "run/gondolin/ca-certificates.crt"), "utf8")).toContain("CA-ONE");

  // Another CA (or a removed local copy): the bundle is rebuilt with it.
  await boot("CA-TWO\n");
  expect(await readFile(bundle, "utf8")).toBe("SYSTEM-A\nCA-TWO\n\n");
});

test("the agent's boot script runs with the kernel line's key, after the CA variables are set and before sandboxd; a first boot runs the seed's", async () => {
  const start = script.indexOf('for arg in $(cat /proc/cmdline); do\n  case "${arg}" in\n    pi_sandbox.agent=*)');
  const end = script.indexOf("\ndone\n", start) + 6;
  expect(start).toBeGreaterThan(script.lastIndexOf("\nsetup_mitm_ca\n"));
  expect(end).toBeLessThan(script.indexOf("exec /usr/bin/sandboxd"));
  const dir = path.join(root, "agent");
  await mkdir(path.join(dir, "var/lib"), { recursive: true });
  await mkdir(path.join(dir, "run/pi-sandbox-agent-seed"), { recursive: true });
  const hook = script.slice(start, end).replace(/\/(var|proc|run)\//g, `${dir}/$1/`);
  const out = path.join(dir, "ran");
  const runHook = async (cmdline: string) => {
    await mkdir(path.join(dir, "proc"), { recursive: true });
    await writeFile(path.join(dir, "proc/cmdline"), cmdline);
    await rm(out, { force: true });
    await run("sh", ["-c", `set -eu\nlog() { :; }\nexport SSL_CERT_FILE=/run/ca.crt\n${hook}\nwait`]);
    return readFile(out, "utf8").catch(() => "did not run");
  };
  // Each script records which it is, the key it was given and the CA variable it inherited.
  const disk = path.join(dir, "var/lib/pi-sandbox-agent.boot");
  const seed = path.join(dir, "run/pi-sandbox-agent-seed/first-boot");
  await writeFile(disk, `printf 'disk %s %s' "$1" "$SSL_CERT_FILE" > ${out}\n`);
  await writeFile(seed, `printf 'seed %s %s' "$1" "$SSL_CERT_FILE" > ${out}\n`);
  expect(await runHook("console=ttyS0 quiet pi_sandbox.agent=0123abcd norandmaps\n")).toBe("disk 0123abcd /run/ca.crt");
  expect(await runHook("console=ttyS0 quiet\n")).toBe("did not run");

  // A disk's first boot (no agent of its own yet): the seed the host shares.
  await rm(disk);
  expect(await runHook("quiet pi_sandbox.agent=0123abcd\n")).toBe("seed 0123abcd /run/ca.crt");
  expect(await runHook("quiet\n")).toBe("did not run");
  // Neither: nothing, and no error.
  await rm(seed);
  expect(await runHook("quiet pi_sandbox.agent=0123abcd\n")).toBe("did not run");
});
