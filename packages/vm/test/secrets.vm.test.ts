// Credentials that stay on the host and read-only host directories, on one real VM. A host-side
// fake API stands for a provider: the guest's curl sends the placeholder it sees in its
// environment, and the server must receive the real value; a second allowed host must never see
// it. Afterwards nothing of the value may be in the guest, its disk or the logs. Host names
// resolve through this file's own `dns.lookup` (as in egress.vm.test.ts), to 127.0.0.1.
import dns from "node:dns";
import fs from "node:fs";
import fsp from "node:fs/promises";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import { DiskStore, runInGuest, startVm, type RunningVm } from "../src/index.js";
import { tempDir } from "./helpers.js";
import { loopbackLookup, memoryLogger, sh, testImage, vmOptions } from "./vm-support.js";

const VALUE = "pisb-real-token-7d1e4c9a0b";
const ROTATED = "pisb-rotated-token-52f8e3";
const PLACEHOLDER = "PI_SANDBOX_SECRET_5e0c2b7f9a1d4e6c8b3a";
const API = "pisb-api.test";
const OTHER = "pisb-other.test";
const NAMES = new Set([API, OTHER]);

let root: string;
let cleanup: () => Promise<void>;
let vm: RunningVm;
let port: number;
let server: http.Server;
const logger = memoryLogger();
const received: { host: string; authorization: string | undefined; token: string | undefined }[] = [];
const originalLookup = dns.lookup;
let mountDir: string;
let diskDir: string;

beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir("pisb-secrets-"));
  server = http.createServer((req, res) => {
    received.push({
      host: (req.headers.host ?? "").replace(/:\d+$/, ""),
      authorization: req.headers.authorization,
      token: req.headers["x-api-token"] as string | undefined,
    });
    res.end("ok");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as net.AddressInfo).port;
  (dns as { lookup: unknown }).lookup = loopbackLookup(NAMES);
  mountDir = path.join(root, "docs");
  await fsp.mkdir(mountDir);
  await fsp.writeFile(path.join(mountDir, "readme.txt"), "from the host\n");
  // A host symlink out of the mounted directory: the guest must not get through it.
  await fsp.writeFile(path.join(root, "outside.txt"), "outside the mount\n");
  await fsp.symlink(path.join(root, "outside.txt"), path.join(mountDir, "escape"));
  const stateRoot = path.join(root, "state");
  diskDir = path.join(root, "disk");
  await new DiskStore({ stateRoot }).createDisk(diskDir, { image: testImage(), diskGiB: 2 });
  const options = vmOptions("secrets", diskDir, stateRoot, { allowedInternalHosts: [API, OTHER], logger });
  vm = await startVm({
    ...options,
    spec: {
      ...options.spec,
      network: {
        allowedHosts: [API, OTHER],
        secrets: { API_TOKEN: { value: VALUE, placeholder: PLACEHOLDER, hosts: [API] } },
      },
      mounts: [{ hostPath: mountDir, guestPath: "/mnt/docs" }],
    },
  });
});

afterAll(async () => {
  await vm?.close();
  (dns as { lookup: unknown }).lookup = originalLookup;
  server?.close();
  await cleanup?.();
});

/** curl in the guest with `args` (a shell fragment using $API_TOKEN); returns the HTTP status. */
async function curl(args: string): Promise<string> {
  return (await sh(vm, `curl -sS -m 30 -o /dev/null -w '%{http_code}' ${args}`)).trim();
}

test("the listed host receives the real value for the placeholder, in a header and in Basic auth", async () => {
  received.length = 0;
  expect(await curl(`-H "Authorization: Bearer $API_TOKEN" http://${API}:${port}/bearer`)).toBe("200");
  expect(await curl(`-u "x-access-token:$API_TOKEN" http://${API}:${port}/basic`)).toBe("200");
  expect(await curl(`-H "X-Api-Token: $API_TOKEN" http://${API}:${port}/custom`)).toBe("200");
  expect(received).toEqual([
    { host: API, authorization: `Bearer ${VALUE}`, token: undefined },
    {
      host: API,
      authorization: `Basic ${Buffer.from(`x-access-token:${VALUE}`).toString("base64")}`,
      token: undefined,
    },
    { host: API, authorization: undefined, token: VALUE },
  ]);
});

test("another allowed host never gets the value: a request with the placeholder is refused on the host", async () => {
  received.length = 0;
  // Gondolin answers 403 itself; the request never leaves the host.
  expect(await curl(`-H "Authorization: Bearer $API_TOKEN" http://${OTHER}:${port}/leak`)).toBe("403");
  expect(await curl(`-u "u:$API_TOKEN" http://${OTHER}:${port}/leak-basic`)).toBe("403");
  expect(received).toEqual([]);
  // The same host without the placeholder is reachable: the refusal is about the secret.
  expect(await curl(`http://${OTHER}:${port}/plain`)).toBe("200");
  expect(received).toEqual([{ host: OTHER, authorization: undefined, token: undefined }]);
});

test("the guest's environment and every process's environ hold only the placeholder", async () => {
  expect((await sh(vm, 'printf %s "$API_TOKEN"')).trim()).toBe(PLACEHOLDER);
  const environ = await runInGuest(vm, ["/bin/sh", "-c", "env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'"]);
  expect(environ.stdout).toContain(`API_TOKEN=${PLACEHOLDER}`);
  expect(environ.stdout).not.toContain(VALUE);
});

test("a value updated on the host is used by the next request; the placeholder stays", async () => {
  received.length = 0;
  vm.updateSecret("API_TOKEN", ROTATED);
  expect(await curl(`-H "Authorization: Bearer $API_TOKEN" http://${API}:${port}/rotated`)).toBe("200");
  expect(received).toEqual([{ host: API, authorization: `Bearer ${ROTATED}`, token: undefined }]);
  expect(() => vm.updateSecret("NOT_GIVEN", "x")).toThrow(expect.objectContaining({ code: "VM_SECRET_INVALID" }));
});

test("a mount is readable, a symlink out of it leads nowhere, and every write under it fails with EROFS", async () => {
  expect(await sh(vm, "cat /mnt/docs/readme.txt")).toBe("from the host\n");
  const escape = await runInGuest(vm, ["/bin/sh", "-c", "cat /mnt/docs/escape"]);
  expect(escape.exitCode).not.toBe(0);
  expect(escape.stdout).not.toContain("outside the mount");
  for (const write of [
    "echo x >> /mnt/docs/readme.txt",
    "touch /mnt/docs/new.txt",
    "mkdir /mnt/docs/dir",
    "rm /mnt/docs/readme.txt",
    "mv /mnt/docs/readme.txt /mnt/docs/moved.txt",
  ]) {
    const result = await runInGuest(vm, ["/bin/sh", "-c", write]);
    expect({ write, exitCode: result.exitCode === 0 ? 0 : "failed", stderr: result.stderr }).toEqual({
      write,
      exitCode: "failed",
      stderr: expect.stringMatching(/Read-only file system/),
    });
  }
  expect(fs.readdirSync(mountDir).sort()).toEqual(["escape", "readme.txt"]);
  expect(fs.readFileSync(path.join(mountDir, "readme.txt"), "utf8")).toBe("from the host\n");
});

test("after the stop, no value is on the disk (the placeholder the guest saved is) or in the log", async () => {
  // The guest keeps its placeholder in a file, as a tool's config would: a positive control for
  // the byte search below, and what a reopened guest would reuse.
  await sh(vm, `mkdir -p /home/dev && printf 'token=%s\\n' "$API_TOKEN" > /home/dev/.toolrc && sync`);
  await vm.stop();
  const files = (await fsp.readdir(diskDir, { recursive: true })).map((file) => path.join(diskDir, String(file)));
  let placeholderSeen = false;
  for (const file of files) {
    if (!(await fsp.stat(file)).isFile()) continue;
    const bytes = await fsp.readFile(file);
    expect({ file, value: bytes.includes(VALUE), rotated: bytes.includes(ROTATED) }).toEqual({
      file,
      value: false,
      rotated: false,
    });
    placeholderSeen ||= bytes.includes(PLACEHOLDER);
  }
  expect(placeholderSeen).toBe(true);
  const log = logger.lines.join("\n");
  expect(log).not.toContain(VALUE);
  expect(log).not.toContain(ROTATED);
});
