// Warm clones on real VMs through the client API: a template prepared with `suspend` saves its
// guest running, and each `create -t` resumes that guest (its service already up) instead of
// booting, then gives it its own machine-id, hostname, ssh host keys and kernel randomness.
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { StateLayout } from "../src/client/index.js";
import { fetchText, makeSandbox, teardown, type Sandbox } from "../src/testing.js";

let sandbox: Sandbox;
let call: Sandbox["call"];

// The template's setup makes ssh host keys and a machine-id: the clones must not keep them.
const TEMPLATE_YAML = `profile: tiny
diskGiB: 4
setup:
  - printf 'Hello from the guest\\n' > /workspace/index.html
  - ssh-keygen -A
  - od -An -N16 -tx1 /dev/urandom | tr -d ' \\n' > /etc/machine-id
services:
  web:
    command: python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
`;

beforeAll(async () => {
  sandbox = await makeSandbox("pwt-");
  await sandbox.writeConfig(TEMPLATE_YAML);
  call = sandbox.call;
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

/** Output of `cmd` in `name`; waits up to 60 s (a TCG guest on a busy host is slow). */
const exec = async (name: string, cmd: string) =>
  (await call({ action: "exec", name, cmd, timeoutMs: 60_000 })).output as string;

test("two instances from a suspended template resume its running guest, each with its own identity and randomness", async () => {
  const prepared = await call({ action: "prepare", name: "tpl", config: "sandbox.yaml", suspend: true });
  expect(prepared).toMatchObject({ state: "prepared", savedMemory: { bytes: expect.any(Number) } });
  const memoryFile = join(new StateLayout(sandbox.home).diskDir("templates", "tpl"), "memory.bin");
  expect((await stat(memoryFile)).size).toBeGreaterThan(1024 * 1024);

  const clones = ["c1", "c2"];
  const progress = new Map<string, string[]>();
  for (const name of clones) {
    const lines: string[] = [];
    progress.set(name, lines);
    const created = await call(
      { action: "create", name, template: "tpl" },
      { onProgress: (e) => lines.push(`[${e.stage}] ${e.message}`) },
    );
    expect(created).toMatchObject({ state: "running", restore: { warm: true }, lastStart: { warm: true } });
    expect(await fetchText(created.previews[0].url)).toBe("200 Hello from the guest\n");
  }
  for (const lines of progress.values()) {
    expect(lines).toContainEqual(expect.stringMatching(/^\[boot\] resumed from saved memory in \d+\.\d s/));
    expect(lines).toContainEqual(expect.stringMatching(/its own machine-id, hostname and ssh host keys/));
    // Resumed, not booted: no setup, no resume hooks, no service start.
    expect(lines.some((l) => l.startsWith("[setup]") || l.startsWith("[resume]"))).toBe(false);
  }
  // Each copy reached the template's running agent through the TCP door the template recorded,
  // without an exec.
  const layout = new StateLayout(sandbox.home);
  for (const name of clones) {
    const log = await readFile(layout.logFile("instances", name), "utf8");
    expect(log).toMatch(/attached to the running agent \S+ \(pid \d+\) through its TCP door/);
  }

  const read = async (cmd: string) => Promise.all(clones.map((name) => exec(name, cmd)));
  const bootIds = await read("cat /proc/sys/kernel/random/boot_id");
  expect(bootIds[0]).toMatch(/^[0-9a-f-]{36}\n$/);
  expect(bootIds[1]).not.toBe(bootIds[0]);
  const random = await read("head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'");
  expect(random[0]).toMatch(/^[0-9a-f]{64}$/);
  expect(random[1]).not.toBe(random[0]);
  const machineIds = await read("cat /etc/machine-id");
  expect(machineIds[0]).toMatch(/^[0-9a-f]{32}\n$/);
  expect(machineIds[1]).not.toBe(machineIds[0]);
  expect(await read("hostname; cat /etc/hostname")).toEqual(["c1\nc1\n", "c2\nc2\n"]);
  // The template's host keys are gone; the keys each one makes now are its own.
  expect(await read("ls /etc/ssh | grep -c ssh_host_ || true")).toEqual(["0\n", "0\n"]);
  const hostKeys = await read(
    "ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key && cut -d' ' -f2 /etc/ssh/ssh_host_ed25519_key.pub",
  );
  expect(hostKeys[0]).toMatch(/^AAAA/);
  expect(hostKeys[1]).not.toBe(hostKeys[0]);

  // Each start consumed only its own link to the template's memory: the template keeps it whole.
  const kept = await stat(memoryFile);
  const record = JSON.parse(await readFile(join(memoryFile, "..", "suspend.json"), "utf8"));
  expect(kept.size).toBe(record.bytes);
  expect(kept.nlink).toBe(1);

  // A later cold start of a clone boots its own checkpoint: its identity stays, nothing is redone.
  await call({ action: "stop", name: "c1" });
  const restarted = await call({ action: "start", name: "c1" });
  expect(restarted).toMatchObject({ state: "running", lastStart: { warm: false } });
  expect(await exec("c1", "cat /etc/machine-id /etc/hostname")).toBe(`${machineIds[0]}c1\n`);
  expect(await fetchText(restarted.previews[0].url)).toBe("200 Hello from the guest\n");
});
