// Credentials that stay on the host and read-only host directories, on one real VM. A host-side
// fake HTTPS API stands for a provider (the VM's `upstream` seam trusts its certificate and dials
// its port for port 443; the guest trusts Gondolin's MITM CA): the guest's curl sends the
// placeholder it sees in its environment, and the server must receive the real value, only in a
// credential header; it echoes every request back, and nothing the guest receives may hold the
// value in any form. A second allowed host must never see it. Afterwards nothing of the value may
// be in the guest, its disk or the logs. Host names resolve through this file's own `dns.lookup`
// (as in egress.vm.test.ts), to 127.0.0.1.
import dns from "node:dns";
import fs from "node:fs";
import fsp from "node:fs/promises";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import { HOST_SERVICES_HOSTNAME } from "@pi-sandbox/config";
import { DiskStore, runInGuest, startVm, type EgressEvent, type RunningVm } from "../src/index.js";
import { tempDir } from "./support/helpers.js";
import { httpsEcho, type HttpsEcho } from "./support/https-echo.js";
import { loopbackLookup, memoryLogger, sh, testImage, vmOptions } from "./support/vm-support.js";

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
let api: HttpsEcho;
const logger = memoryLogger();
const received: { host: string; authorization: string | undefined; token: string | undefined }[] = [];
const originalLookup = dns.lookup;
let mountDir: string;
let diskDir: string;

/** The secret uses the VM told of (for the controller's ledger): name and host, never the value. */
const uses: EgressEvent[] = [];

beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir("pisb-secrets-"));
  server = http.createServer((req, res) => {
    received.push({
      host: (req.headers.host ?? "").replace(/:\d+$/, ""),
      authorization: req.headers.authorization,
      token: req.headers["x-api-key"] as string | undefined,
    });
    res.end(JSON.stringify(req.headers));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as net.AddressInfo).port;
  api = await httpsEcho([API]);
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
  const options = vmOptions("secrets", diskDir, stateRoot, {
    allowedInternalHosts: [API, OTHER],
    logger,
    upstream: { ca: api.ca, httpsPort: api.port },
  });
  vm = await startVm({
    ...options,
    onEgress: (event) => void (event.kind === "secret" && uses.push(event)),
    spec: {
      ...options.spec,
      network: {
        allowedHosts: [API, OTHER],
        hostPorts: [port],
        secrets: {
          API_TOKEN: { value: VALUE, placeholder: PLACEHOLDER, hosts: [API, `${HOST_SERVICES_HOSTNAME}:${port}`] },
        },
      },
      mounts: [{ hostPath: mountDir, guestPath: "/mnt/docs" }],
    },
  });
});

afterAll(async () => {
  await vm?.close();
  (dns as { lookup: unknown }).lookup = originalLookup;
  server?.close();
  await api?.close();
  await cleanup?.();
});

/** curl in the guest with `args` (a shell fragment using $API_TOKEN); returns the HTTP status. */
async function curl(args: string): Promise<string> {
  return (await sh(vm, `curl -sS -m 30 -o /dev/null -w '%{http_code}' ${args}`)).trim();
}

/** Every form of `value` the scrubber knows, to search what the guest received for. */
function forms(value: string): string[] {
  const b64 = Buffer.from(value).toString("base64");
  const url = b64.replace(/\+/g, "-").replace(/\//g, "_");
  return [value, b64, b64.replace(/=+$/, ""), url, url.replace(/=+$/, ""), encodeURIComponent(value)];
}

test("over HTTPS the API gets the value in authorization only; nothing the guest receives holds it in any form", async () => {
  // -k: the guest's side of TLS ends at Gondolin's MITM, which is not what is tested here (the
  // host's side checks the API's certificate). -i: headers and body, all kept in one file.
  const fetchAll = [
    `curl -k -sS -i -m 30 -H "Authorization: Bearer $API_TOKEN" https://${API}/auth`,
    `curl -k -sS -i -m 30 -u "x-access-token:$API_TOKEN" https://${API}/basic`,
    `curl -k -sS -i -m 30 -A "tool/1 $API_TOKEN" https://${API}/user-agent`,
    `curl -k -sS -i -m 30 -H "anthropic-beta: $API_TOKEN" https://${API}/beta`,
    `curl -k -sS -i -m 30 -d "{\\"key\\":\\"$API_TOKEN\\"}" https://${API}/body`,
    `curl -k -sS -i -m 30 -H "Authorization: Bearer $API_TOKEN" http://${API}:8080/clear`,
    `curl -k -sS -i -m 30 -H "Authorization: Bearer $API_TOKEN" http://${API}/clear80`,
  ].join(" ; echo ; ");
  uses.length = 0;
  const out = await sh(vm, `(${fetchAll}) > /tmp/received 2>&1; cat /tmp/received`);
  // The API saw the value in the two credential requests, the body as written, nothing else.
  expect(api.received.map((r) => [r.url, r.headers.authorization ?? null, r.body])).toEqual([
    ["/auth", `Bearer ${VALUE}`, ""],
    ["/basic", `Basic ${Buffer.from(`x-access-token:${VALUE}`).toString("base64")}`, ""],
    ["/body", null, `{"key":"${PLACEHOLDER}"}`],
  ]);
  // Each request the value went out in was told of, by name and host; the refused ones were not.
  expect(uses).toEqual(Array(2).fill({ kind: "secret", secret: "API_TOKEN", host: API }));
  // The echoes came back with the placeholder; the refusals are the host's 403s.
  expect(out).toContain(`"authorization":"Bearer ${PLACEHOLDER}"`);
  expect(out).toContain(`"authorization":"Basic ${Buffer.from(`x-access-token:${PLACEHOLDER}`).toString("base64")}"`);
  expect(out.match(/^HTTP\/1\.1 403/gm)).toHaveLength(4);
  const bytes = Buffer.from(await vm.readFile("/tmp/received"));
  for (const form of forms(VALUE)) expect({ form, found: bytes.includes(form) }).toEqual({ form, found: false });
});

test("a host port listed for the secret gets it over plain HTTP in a credential header, and its answer is scrubbed", async () => {
  received.length = 0;
  uses.length = 0;
  const echoed = await sh(vm, `curl -sS -m 30 -H "X-Api-Key: $API_TOKEN" http://${HOST_SERVICES_HOSTNAME}:${port}/hp`);
  expect(received.at(-1)).toMatchObject({ token: VALUE });
  expect(uses).toEqual([{ kind: "secret", secret: "API_TOKEN", host: `${HOST_SERVICES_HOSTNAME}:${port}` }]);
  expect(echoed).toContain(PLACEHOLDER);
  expect(echoed).not.toContain(VALUE);
  expect(await curl(`-A "$API_TOKEN" http://${HOST_SERVICES_HOSTNAME}:${port}/hp-ua`)).toBe("403");
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
  vm.updateSecret("API_TOKEN", ROTATED);
  const echoed = await sh(vm, `curl -k -sS -m 30 -H "Authorization: Bearer $API_TOKEN" https://${API}/rotated`);
  expect(api.received.at(-1)!.headers.authorization).toBe(`Bearer ${ROTATED}`);
  expect(echoed).not.toContain(ROTATED);
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
