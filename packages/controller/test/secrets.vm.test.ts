// network.secrets and mounts end to end on real VMs, through the client and a spawned daemon: a
// template prepared with a secret and a mount, an instance made from it, and then no trace of the
// values anywhere in the state directory (qcow2 layers of both, records, statuses, logs). The
// substitution into requests is the vm package's secrets.vm.test.ts. The instance's ledger records
// each request's decision, and holds no value either.
import { spawn } from "node:child_process";
import { mkdir, readFile, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { makeSandbox, teardown, type Sandbox } from "../src/testing.js";

const ENV_VALUE = "pisb-vm-env-token-5d3c2a19";
const FILE_VALUE = "pisb-vm-file-token-0be7c6f4";

// Node's fetch through the VM's TLS proxy, as Pi's provider clients do; any HTTP answer means the
// guest's Node accepted the proxy's certificate.
const TLS_PROBE = `fetch("https://api.example.com/").then(
  () => console.log("tls ok"),
  (error) => console.log("tls failed", error.cause?.code ?? error.message),
);
`;

let sandbox: Sandbox;

beforeAll(async () => {
  sandbox = await makeSandbox("psec-");
  sandbox.env.PISB_VM_TEST_TOKEN = ENV_VALUE;
  await writeFile(join(sandbox.dir, "token"), `${FILE_VALUE}\n`);
  await mkdir(join(sandbox.dir, "docs"));
  await writeFile(join(sandbox.dir, "docs", "readme.txt"), "from the host\n");
  await sandbox.writeConfig(`profile: tiny
diskGiB: 4
network:
  allowedHosts: [api.example.com]
  secrets:
    API_TOKEN: { from: 'env:PISB_VM_TEST_TOKEN', hosts: [api.example.com] }
    FILE_TOKEN: { from: 'file:token', hosts: [api.example.com] }
mounts:
  - { host: ./docs, guest: /mnt/docs }
setup:
  - mkdir -p /home/dev && printf '%s %s\\n' "$API_TOKEN" "$FILE_TOKEN" > /home/dev/.toolrc && cat /mnt/docs/readme.txt > /home/dev/copied.txt
`);
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

/** Runs the printed ssh command with `remote` appended; resolves with its output. */
function runSsh(command: string, remote: string): Promise<{ code: number | null; stdout: string }> {
  const [program, ...args] = command.split(" ");
  const child = spawn(program!, ["-o", "BatchMode=yes", "-o", "ConnectTimeout=60", ...args, remote], {
    stdio: ["ignore", "pipe", "ignore"],
  });
  let stdout = "";
  child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
  const timer = setTimeout(() => child.kill("SIGKILL"), 120_000);
  return new Promise((resolve) =>
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout });
    }),
  );
}

test("setup, exec and a terminal see placeholders and trust the TLS proxy, a mount is read-only, and no value is left anywhere", async () => {
  const prepared = await sandbox.call({ action: "prepare", name: "base", config: "sandbox.yaml" });
  expect(prepared.state).toBe("prepared");
  const created = await sandbox.call({ action: "create", name: "demo", template: "base" });
  expect(created).toMatchObject({
    state: "running",
    secrets: [
      { name: "API_TOKEN", hosts: ["api.example.com"] },
      { name: "FILE_TOKEN", hosts: ["api.example.com"] },
    ],
    mounts: [{ host: join(sandbox.dir, "docs"), guest: "/mnt/docs" }],
  });

  const env = await sandbox.call({ action: "exec", name: "demo", cmd: 'printf "%s %s\\n" "$API_TOKEN" "$FILE_TOKEN"' });
  const placeholders = (env.output as string).trim();
  expect(placeholders).toMatch(/^PI_SANDBOX_SECRET_[0-9a-f]{40} PI_SANDBOX_SECRET_[0-9a-f]{40}$/);
  // What the template's setup stored still matches: the instance shares the template's placeholders.
  const saved = await sandbox.call({ action: "exec", name: "demo", cmd: "cat /home/dev/.toolrc /home/dev/copied.txt" });
  expect(saved.output).toBe(`${placeholders}\nfrom the host\n`);

  const mount = await sandbox.call({
    action: "exec",
    name: "demo",
    cmd: "cat /mnt/docs/readme.txt; touch /mnt/docs/new 2>&1; echo x >> /mnt/docs/readme.txt 2>&1; echo done",
  });
  expect(mount.output).toMatch(/^from the host\n.*Read-only file system\n.*Read-only file system\ndone\n$/s);
  expect(await readdir(join(sandbox.dir, "docs"))).toEqual(["readme.txt"]);

  const shell = await sandbox.call({ action: "shell", name: "demo" });
  const login = await runSsh(shell.command as string, `sh -lc 'printf "%s %s\\n" "$API_TOKEN" "$FILE_TOKEN"'`);
  expect(login).toEqual({ code: 0, stdout: `${placeholders}\n` });
  // HTTPS goes through the VM's TLS proxy: Node trusts its CA in an exec (the VM's environment
  // names it) and in a terminal (the profile `shell` writes), with nothing turned off. The
  // handshake is what is checked; the upstream's answer does not matter.
  await sandbox.call({ action: "write", name: "demo", path: "/tmp/tls.js", content: TLS_PROBE });
  // Node's first start in a TCG guest on a busy host can take longer than exec's default 10 s wait.
  const execTls = await sandbox.call({ action: "exec", name: "demo", cmd: "node /tmp/tls.js", timeoutMs: 60_000 });
  expect(execTls.output).toBe("tls ok\n");
  // The ledger has the request's decision (and, below, no value: the byte search covers its files).
  const refused = await sandbox.call({
    action: "exec",
    name: "demo",
    cmd: `node -e 'fetch("https://not-allowed.example.org/").then((r) => console.log(r.status), (e) => console.log("refused"))'`,
    timeoutMs: 60_000,
  });
  expect(refused.exitCode).toBe(0);
  const egress = (await sandbox.call({ action: "audit", name: "demo", kind: ["egress"], last: 1000 })).entries;
  expect(egress).toContainEqual(
    expect.objectContaining({
      kind: "egress",
      data: expect.objectContaining({ host: "api.example.com", port: 443, protocol: "https", allowed: true }),
    }),
  );
  expect(egress).toContainEqual(
    expect.objectContaining({
      data: expect.objectContaining({ host: "not-allowed.example.org", allowed: false, rule: "not in allowedHosts" }),
    }),
  );
  expect(await runSsh(shell.command as string, "sh -lc 'node /tmp/tls.js'")).toEqual({ code: 0, stdout: "tls ok\n" });

  const guestEnviron = await sandbox.call({
    action: "exec",
    name: "demo",
    cmd: "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c _TOKEN=PI_SANDBOX_SECRET_; cat /proc/[0-9]*/environ 2>/dev/null | grep -c pisb-vm- || true",
  });
  const [withPlaceholder, withValue] = (guestEnviron.output as string).trim().split("\n").map(Number);
  expect(withPlaceholder).toBeGreaterThan(0);
  expect(withValue).toBe(0);
  expect((await sandbox.call({ action: "stop", name: "demo" })).state).toBe("stopped");

  // Every file under the state root: both disks (template and instance layers), records,
  // statuses, controller logs, Gondolin's runtime files.
  const files = await readdir(sandbox.home, { recursive: true, withFileTypes: true });
  let searched = 0;
  let placeholderFound = false;
  for (const file of files.filter((f) => f.isFile())) {
    const bytes = await readFile(join(file.parentPath, file.name)).catch(() => undefined);
    if (!bytes) continue;
    searched++;
    expect({
      file: join(file.parentPath, file.name),
      env: bytes.includes(ENV_VALUE),
      file_: bytes.includes(FILE_VALUE),
    }).toEqual({ file: join(file.parentPath, file.name), env: false, file_: false });
    placeholderFound ||= bytes.includes(placeholders.split(" ")[0]!);
  }
  expect(searched).toBeGreaterThan(5);
  expect(placeholderFound).toBe(true); // the byte search does see what the guest wrote
});
