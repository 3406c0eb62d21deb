// Smoke test of the guest test image: boots it once through Gondolin under TCG and checks what the
// other suites rely on — exec, files, python3, the Node toolchain, egress policy, ingress, a disk
// that grows. SSH and reopening a persistent disk are the vm package's ssh and lifecycle suites.
import { execFileSync } from "node:child_process";
import { readFile } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import type { VM } from "@earendil-works/gondolin";
import { bootVm, isolateTempDirs, testImage } from "./support/vm-suite.js";

const GiB = 1024 ** 3;

let vm: VM | undefined;
let temp: Awaited<ReturnType<typeof isolateTempDirs>>;
let diskPath: string;
let hostServer: http.Server;
let hostPort: number;
let manifest: { buildId: string; config: { kernelRelease: string } };

function guest(): VM {
  if (!vm) throw new Error("the shared VM did not boot");
  return vm;
}

const allowList = () => ({ allowedHosts: ["127.0.0.1"], allowedInternalHosts: ["127.0.0.1"] });

beforeAll(async () => {
  temp = await isolateTempDirs();
  manifest = JSON.parse(await readFile(path.join(testImage(), "manifest.json"), "utf8"));
  hostServer = http.createServer((req, res) => res.end(`host saw ${req.url}\n`));
  await new Promise<void>((resolve) => hostServer.listen(0, "127.0.0.1", resolve));
  hostPort = (hostServer.address() as AddressInfo).port;
  // A persistent disk with room to grow: 2 GiB virtual size over the smaller rootfs.ext4.
  diskPath = path.join(temp.dir, "disk.qcow2");
  execFileSync("qemu-img", [
    "create",
    "-q",
    "-f",
    "qcow2",
    "-F",
    "raw",
    "-b",
    path.join(testImage(), "rootfs.ext4"),
    diskPath,
    String(2 * GiB),
  ]);
  const booted = await bootVm({ rootDiskPath: diskPath, ...allowList() });
  vm = booted.vm;
  process.stderr.write(`e2e smoke: cold boot (VM.create -> first exec) took ${(booted.bootMs / 1000).toFixed(1)} s\n`);
});

afterAll(async () => {
  await vm?.close();
  await new Promise((resolve) => hostServer?.close(resolve));
  await temp?.cleanup();
});

test("exec reports exit codes and honours stdin, cwd and env", async () => {
  const failed = await guest().exec("echo partial; exit 3");
  expect(failed.exitCode).toBe(3);
  expect(failed.stdout).toBe("partial\n");

  const piped = await guest().exec("tr a-z A-Z", { stdin: "piped from the host\n" });
  expect(piped.stdout).toBe("PIPED FROM THE HOST\n");

  const cwd = await guest().exec("pwd", { cwd: "/usr/share" });
  expect(cwd.stdout).toBe("/usr/share\n");

  const env = await guest().exec('printf "%s" "$SMOKE_VALUE"', { env: { SMOKE_VALUE: "with spaces & symbols" } });
  expect(env.stdout).toBe("with spaces & symbols");
});

test("vm.fs writes a file the guest sees and reads it back", async () => {
  const content = `written by the host at ${Date.now()}\n`;
  await guest().fs.writeFile("/root/from-host.txt", content);
  expect(await guest().fs.readFile("/root/from-host.txt", { encoding: "utf8" })).toBe(content);
  const cat = await guest().exec("cat /root/from-host.txt");
  expect(cat.stdout).toBe(content);
});

test("the guest runs the expected kernel and has python3 and the tools the suites use", async () => {
  const kernel = await guest().exec("uname -r");
  expect(kernel.stdout.trim()).toBe(manifest.config.kernelRelease);

  const py = await guest().exec([
    "/usr/bin/python3",
    "-c",
    "import json, sys; print(json.dumps(sys.version_info[:2]))",
  ]);
  expect(py.exitCode).toBe(0);
  expect(JSON.parse(py.stdout)[0]).toBe(3);
  const alias = await guest().exec("python --version");
  expect(alias.stdout).toMatch(/^Python 3\./);

  const tools = await guest().exec(
    "for t in git curl tar setpriv runuser resize2fs sshd ip udhcpc modprobe ps; do command -v $t >/dev/null || echo missing $t; done",
  );
  expect(tools.stdout).toBe("");
});

test("the guest has Node 24, npm, node-gyp, bun, make, g++ and fd on PATH", async () => {
  const versions = await guest().exec(
    "node --version; npm --version; node-gyp --version; bun --version; bunx --version; make --version | head -1; " +
      "g++ --version | head -1; fd --version; tar --version | head -1",
  );
  expect(versions.exitCode).toBe(0);
  // npm warns about unknown config keys on every command; the image's config has none.
  expect(versions.stderr).toBe("");
  const lines = versions.stdout.trim().split("\n");
  expect(lines[0]).toMatch(/^v24\.\d+\.\d+$/);
  expect(lines[1]).toMatch(/^11\.\d+\.\d+$/);
  expect(lines[2]).toMatch(/^v\d+\.\d+\.\d+$/);
  expect(lines[3]).toMatch(/^1\.\d+\.\d+$/);
  expect(lines[4]).toBe(lines[3]);
  expect(lines[5]).toMatch(/^GNU Make /);
  expect(lines[6]).toMatch(/^g\+\+ /);
  expect(lines[7]).toMatch(/^fd(find)? \d+\./);
  expect(lines[8]).toMatch(/^tar \(GNU tar\) /);
});

test("node-gyp builds a Node-API addon without downloading headers (nodejs.org is off the allow-list)", async () => {
  await guest().fs.mkdir("/root/addon", { recursive: true });
  await guest().fs.writeFile(
    "/root/addon/binding.gyp",
    JSON.stringify({ targets: [{ target_name: "hello", sources: ["hello.c"] }] }),
  );
  await guest().fs.writeFile(
    "/root/addon/hello.c",
    [
      "#include <node_api.h>",
      "static napi_value Hello(napi_env env, napi_callback_info info) {",
      "  napi_value out;",
      '  napi_create_string_utf8(env, "built in the guest", NAPI_AUTO_LENGTH, &out);',
      "  return out;",
      "}",
      "NAPI_MODULE_INIT() {",
      "  napi_value fn;",
      '  napi_create_function(env, "hello", NAPI_AUTO_LENGTH, Hello, NULL, &fn);',
      '  napi_set_named_property(env, exports, "hello", fn);',
      "  return exports;",
      "}",
      "",
    ].join("\n"),
  );
  const build = await guest().exec(
    "cd /root/addon && node-gyp rebuild >build.log 2>&1 || { tail -n 30 build.log; exit 1; }; " +
      "node -e 'console.log(require(\"./build/Release/hello.node\").hello())'",
  );
  expect(build.stdout).toBe("built in the guest\n");
  expect(build.exitCode).toBe(0);
}, 300_000);

test("/root lives on the root disk, not on a tmpfs", async () => {
  const fsType = await guest().exec("stat -f -c %T /root; findmnt -n -o TARGET --target /root");
  expect(fsType.stdout).toBe("ext2/ext3\n/\n");
});

test("the guest trusts Gondolin's MITM CA through the system bundle and OpenSSL's CApath", async () => {
  const verify = await guest().exec(
    "openssl verify -CAfile /etc/ssl/certs/ca-certificates.crt /etc/gondolin/mitm/ca.crt && " +
      "openssl verify -CApath /etc/ssl/certs /etc/gondolin/mitm/ca.crt && " +
      "grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt",
  );
  expect(verify.exitCode).toBe(0);
  const [fileCheck, pathCheck, count] = verify.stdout.trim().split("\n");
  expect([fileCheck, pathCheck]).toEqual(["/etc/gondolin/mitm/ca.crt: OK", "/etc/gondolin/mitm/ca.crt: OK"]);
  // Debian's own roots are still there next to it.
  expect(Number(count)).toBeGreaterThan(100);
});

test("egress policy refuses a host off the allow-list and lets an allowed one through", async () => {
  // 203.0.113.7 (TEST-NET-3) is not on the allow-list: Gondolin must answer 403 itself, at once.
  const blocked = await guest().exec([
    "/usr/bin/curl",
    "-sS",
    "--max-time",
    "60",
    "-o",
    "/dev/null",
    "-w",
    "%{http_code}",
    "http://203.0.113.7/",
  ]);
  expect({ exit: blocked.exitCode, status: blocked.stdout }).toEqual({ exit: 0, status: "403" });

  // 127.0.0.1 is allowed: the request leaves the guest (to any address: Gondolin routes by the
  // Host header) and reaches the HTTP server of this test on the host.
  const allowed = await guest().exec([
    "/usr/bin/curl",
    "-sS",
    "--max-time",
    "60",
    "--connect-to",
    "::192.0.2.1:",
    `http://127.0.0.1:${hostPort}/from-guest`,
  ]);
  expect({ exit: allowed.exitCode, body: allowed.stdout, err: allowed.stderr }).toEqual({
    exit: 0,
    body: "host saw /from-guest\n",
    err: "",
  });
});

test("ingress serves a guest python3 http.server to a host HTTP client", async () => {
  expect((await guest().exec("mkdir -p /srv/www")).exitCode).toBe(0);
  await guest().fs.writeFile("/srv/www/hello.txt", "served from the guest\n");
  const start = await guest().exec(
    "setsid nohup python3 -m http.server 8080 --bind 127.0.0.1 --directory /srv/www >/tmp/http.log 2>&1 </dev/null & " +
      "for i in $(seq 1 200); do curl -fsS -o /dev/null http://127.0.0.1:8080/hello.txt && exit 0; sleep 0.3; done; " +
      "cat /tmp/http.log; exit 1",
  );
  expect(start.exitCode).toBe(0);
  guest().setIngressRoutes([{ prefix: "/", port: 8080, stripPrefix: false }]);
  const ingress = await guest().enableIngress({
    listenHost: "127.0.0.1",
    listenPort: 0,
    upstreamHeaderTimeoutMs: 120_000,
    upstreamResponseTimeoutMs: 600_000,
  });
  try {
    const res = await fetch(new URL("/hello.txt", ingress.url));
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("served from the guest\n");
  } finally {
    await ingress.close();
  }
});

test("resize2fs grows the root filesystem to the disk's size", async () => {
  const before = await guest().exec("df -B1 --output=size / | tail -1");
  expect(Number(before.stdout)).toBeLessThan(1.5 * GiB);
  const grow = await guest().exec("resize2fs /dev/vda 2>&1");
  expect(grow.exitCode).toBe(0);
  const after = await guest().exec("df -B1 --output=size / | tail -1");
  expect(Number(after.stdout)).toBeGreaterThan(1.8 * GiB);
});
