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
