// Faults a user meets on real VMs, driven through the controller client: a crash-looping service,
// a readiness failure, the network allow-list, the terminal across stop, and a guest that never
// boots. One instance is shared by the first four; the bad image boots in parallel with it.
import { createHash, randomBytes } from "node:crypto";
import { copyFile, link, mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { isControllerError } from "@pi-sandbox/controller/client";
import { execFileAsync, testImage } from "./support/vm-suite.js";
import {
  fetchText,
  makeSandbox,
  qemuFor,
  qemuGone,
  sleep,
  teardown,
  type Sandbox,
} from "@pi-sandbox/controller/testing";

const APP_YAML = `profile: tiny
diskGiB: 4
network:
  allowedHosts: [registry.npmjs.org]
setup:
  - printf 'web is up\\n' > /workspace/index.html
services:
  web:
    command: python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
  crash:
    command: echo boom; exit 3
    health: process
  bad:
    command: python3 -m http.server $PORT --bind 127.0.0.1 --directory /var/empty
    health: /never-there
    timeoutMs: 5000
`;

let sandbox: Sandbox;
let created: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- loose JSON
let createdAt = 0;
let badImage: Promise<{ error: unknown; ms: number }>;
/** How long after create the crash loop is sampled (the other tests run meanwhile). */
const LOOP_MS = 30_000;

/**
 * The test image with a kernel of random bytes: its other files hard-linked (an image's files must
 * lie inside its directory, so no symlinks), its manifest naming the random kernel's checksum.
 */
async function makeBrokenImage(dir: string): Promise<string> {
  const image = join(dir, "broken-image");
  await mkdir(image);
  for (const file of await readdir(testImage())) {
    if (file === "vmlinuz-virt" || file === "manifest.json") continue;
    await link(join(testImage(), file), join(image, file)).catch(() =>
      copyFile(join(testImage(), file), join(image, file)),
    );
  }
  const kernel = randomBytes(4 * 1024 * 1024);
  await writeFile(join(image, "vmlinuz-virt"), kernel);
  const manifest = JSON.parse(await readFile(join(testImage(), "manifest.json"), "utf8")) as {
    checksums?: Record<string, string>;
  };
  if (manifest.checksums) manifest.checksums.kernel = createHash("sha256").update(kernel).digest("hex");
  await writeFile(join(image, "manifest.json"), JSON.stringify(manifest));
  return image;
}

beforeAll(async () => {
  sandbox = await makeSandbox("psf-");
  await sandbox.writeConfig(APP_YAML);
  created = await sandbox.call({ action: "create", name: "app", config: "sandbox.yaml" });
  createdAt = Date.now();
  // The guest that never boots runs alongside the tests of the shared instance. It starts only
  // after "app" is up: concurrent first boots in a fresh state root race on Gondolin's MITM CA
  // (a product bug, reported separately), which would break app's HTTPS egress.
  const brokenImage = await makeBrokenImage(sandbox.dir);
  await sandbox.writeConfig("profile: tiny\ndiskGiB: 4\n", "broken.yaml", brokenImage);
  const t0 = Date.now();
  badImage = sandbox.call({ action: "create", name: "never-boots", config: "broken.yaml" }).then(
    () => ({ error: undefined, ms: Date.now() - t0 }),
    (error: unknown) => ({ error, ms: Date.now() - t0 }),
  );
}, 400_000);

afterAll(async () => {
  await badImage?.catch(() => undefined);
  const left = await teardown(sandbox);
  expect(left).toEqual([]);
}, 300_000);

test("a readiness failure leaves the instance running and points at the service's logs", async () => {
  expect(created.state).toBe("running");
  const view = await sandbox.call({ action: "inspect", name: "app" });
  expect(view.state).toBe("running");
  const errors = view.errors as { code: string; message: string; hint?: string }[];
  const bad = errors.filter((e) => /\bbad\b/.test(e.message));
  expect(bad).toHaveLength(1);
  expect(bad[0]!.hint).toContain('"service":"bad"');
  expect(bad[0]!.hint).toContain('"action":"logs"');
  // The other services are not blamed.
  expect(errors.filter((e) => /\bweb\b|\bcrash\b/.test(e.message))).toEqual([]);
  expect(await fetchText(created.previews[0].url)).toBe("200 web is up\n");
});

test("the network allow-list lets the npm registry through and refuses pypi.org", async () => {
  const curl = (url: string) =>
    sandbox.call({
      action: "exec",
      name: "app",
      cmd: `curl -sS --max-time 40 -o /dev/null -w '%{http_code}' ${url}; echo " exit=$?"`,
      timeoutMs: 60_000,
    });
  const allowed = await curl("https://registry.npmjs.org/");
  expect(allowed.output.trim()).toBe("200 exit=0");
  const refused = await curl("https://pypi.org/");
  // Refusal is either Gondolin's own 403 or a failed connection/handshake: never a 2xx/3xx.
  const [code, exit] = refused.output.trim().split(/\s+/);
  expect(refused.output).toMatch(/exit=\d+/);
  expect(code === "403" || (exit !== "exit=0" && !/^[23]\d\d$/.test(code ?? ""))).toBe(true);
});

test("a service that crash-loops for half a minute restarts about once a second while the rest works", async () => {
  const restartsOf = async () => {
    const status = await sandbox.call({ action: "services", name: "app", op: "status", service: "crash" });
    return status.services[0].restarts as number;
  };
  const first = await restartsOf();
  // Keep using the instance while the loop runs.
  while (Date.now() - createdAt < LOOP_MS) {
    const quick = await sandbox.call({ action: "exec", name: "app", cmd: "echo $((6*7))" });
    expect(quick).toMatchObject({ running: false, exitCode: 0, output: "42\n" });
    expect(await fetchText(created.previews[0].url)).toBe("200 web is up\n");
    await sleep(5000);
  }
  const sampledAt = Date.now();
  const restarts = await restartsOf();
  process.stderr.write(
    `faults: crash loop restarted ${restarts} times in ${((sampledAt - createdAt) / 1000).toFixed(0)} s after create\n`,
  );
  const view = await sandbox.call({ action: "inspect", name: "app" });
  expect(view.state).toBe("running");
  expect(restarts).toBeGreaterThan(first);
  // About once a second since creation: at least one every two seconds, nowhere near hundreds.
  const seconds = (sampledAt - createdAt) / 1000 + 10; // + the time services ran before create resolved
  expect(restarts).toBeGreaterThanOrEqual(LOOP_MS / 2000);
  expect(restarts).toBeLessThanOrEqual(seconds * 1.2);
  const status = await sandbox.call({ action: "services", name: "app", op: "status", service: "crash" });
  expect(status.services[0].lastExit).toMatchObject({ exitCode: 3 });
  const logs = await sandbox.call({ action: "logs", name: "app", service: "crash", lines: 20 });
  expect(logs.text).toContain("boom");
  const web = await sandbox.call({ action: "services", name: "app", op: "status", service: "web" });
  expect(web.services[0]).toMatchObject({ state: "running", restarts: 0 });
}, 120_000);

test("the terminal command works while running and fails after stop", async () => {
  await expect(sandbox.call({ action: "shell", name: "app" }, { caller: "model" })).rejects.toMatchObject({
    code: "CONTROLLER_USER_ONLY",
  });
  const shell = await sandbox.call({ action: "shell", name: "app" }, { caller: "user" });
  expect(typeof shell.command).toBe("string");
  const run = () =>
    execFileAsync("sh", ["-c", `${shell.command} -o BatchMode=yes -o ConnectTimeout=60 -o LogLevel=ERROR echo ok`], {
      timeout: 120_000,
    });
  const { stdout } = await run();
  expect(stdout).toBe("ok\n");
  const stopped = await sandbox.call({ action: "stop", name: "app" });
  expect(stopped.state).toBe("stopped");
  await expect(run()).rejects.toMatchObject({ code: expect.any(Number) });
  expect(await qemuGone(join(sandbox.home, "runtime"), 5000)).toEqual([]);
}, 180_000);

test("a guest that never boots rejects create with a typed error within 3 minutes, keeps its log and leaves nothing", async () => {
  const { error, ms } = await badImage;
  expect(error).toBeDefined();
  expect(isControllerError(error)).toBe(true);
  const e = error as { code: string; message: string; hint?: string };
  process.stderr.write(
    `faults: broken kernel rejected after ${(ms / 1000).toFixed(1)} s with ${e.code}: ${e.message}\n`,
  );
  expect(e.code).toMatch(/^(VM|CONTROLLER)_[A-Z_]+$/);
  expect(e.message.length).toBeLessThan(600);
  expect(e.message).not.toMatch(/^qemu/i);
  expect(ms).toBeLessThan(180_000);
  // A create that fails before its first boot finished leaves nothing behind; the error says
  // where the controller log was kept, with its tail, so running create again is the next step.
  expect(e.hint).toMatch(/Nothing of never-boots was kept: fix the cause and run create again/);
  const details = (error as { details: { logFile: string; logTail: string } }).details;
  expect(details.logFile).toMatch(/logs\/never-boots\.create-failed\.log$/);
  expect(details.logTail).toContain("create failed, removing never-boots");
  await expect(sandbox.call({ action: "inspect", name: "never-boots" })).rejects.toMatchObject({
    code: "CONTROLLER_NOT_FOUND",
  });
  expect(qemuFor("broken-image")).toEqual([]);
}, 200_000);
