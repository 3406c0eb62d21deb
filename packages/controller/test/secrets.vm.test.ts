// network.secrets and mounts end to end on real VMs, through the client and a spawned daemon: a
// template prepared with a secret and a mount, an instance made from it, and then no trace of the
// values anywhere in the state directory (qcow2 layers of both, records, statuses, logs, ledgers)
// or in what the dashboard serves. The substitution into requests is the vm package's
// secrets.vm.test.ts. The instance's ledger (#47) holds every action, exec and transfer the test
// made, each request's decision and each secret put into a request, over HTTPS and to a host
// port, counted against what the test did, and no value either.
import { spawn } from "node:child_process";
import { mkdir, readFile, readdir, writeFile } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { makeSandbox, teardown, type LooseResult, type Sandbox } from "../src/testing.js";

const ENV_VALUE = "pisb-vm-env-token-5d3c2a19";
const FILE_VALUE = "pisb-vm-file-token-0be7c6f4";

// Node's fetch through the VM's TLS proxy, as Pi's provider clients do; any HTTP answer means the
// guest's Node accepted the proxy's certificate.
const TLS_PROBE = `fetch("https://api.example.com/").then(
  () => console.log("tls ok"),
  (error) => console.log("tls failed", error.cause?.code ?? error.message),
);
`;

// A secret put into requests to the host service on a host port, whose proxy puts it in. (Over
// HTTPS, the vm package's secrets.vm.test.ts counts them: api.example.com has no upstream here.)
const USE_SECRET = `const auth = { authorization: "Bearer " + process.env.API_TOKEN };
(async () => {
  for (let i = 0; i < 2; i++) {
    const answer = await fetch("http://host.sandbox.internal:" + process.argv[2] + "/", { headers: auth });
    console.log((await answer.text()).trim());
  }
})();
`;

/** The text of a server-sent event stream at `url` up to `marker` (30 s at most). */
async function streamUntil(url: URL, cookie: string, marker: string): Promise<string> {
  const stream = new AbortController();
  const timer = setTimeout(() => stream.abort(), 30_000);
  let text = "";
  try {
    const reader = (await fetch(url, { headers: { cookie }, signal: stream.signal })).body!.getReader();
    while (!text.includes(marker)) text += new TextDecoder().decode((await reader.read()).value);
  } catch {
    // Cut off at 30 s: what came is searched all the same.
  } finally {
    clearTimeout(timer);
    stream.abort();
  }
  return text;
}

let sandbox: Sandbox;
/** A host service the guest reaches as host.sandbox.internal:<port>, with API_TOKEN put in by the host. */
let hostService: http.Server;
let hostPort: number;
/** The Authorization headers it received. */
const received: string[] = [];
/** Every call the test made on demo, in order: the ledger must hold each one. */
const calls: Record<string, unknown>[] = [];
/** A call on demo, counted. */
const demo = (action: Record<string, unknown>) => {
  const call = { ...action, name: "demo" };
  calls.push(call);
  return sandbox.call(call);
};

beforeAll(async () => {
  hostService = http.createServer((request, response) => {
    received.push(request.headers.authorization ?? "");
    response.end("host ok\n");
  });
  await new Promise<void>((resolve) => hostService.listen(0, "127.0.0.1", resolve));
  hostPort = (hostService.address() as AddressInfo).port;
  sandbox = await makeSandbox("psec-");
  sandbox.env.PISB_VM_TEST_TOKEN = ENV_VALUE;
  await writeFile(join(sandbox.dir, "token"), `${FILE_VALUE}\n`);
  await mkdir(join(sandbox.dir, "docs"));
  await writeFile(join(sandbox.dir, "docs", "readme.txt"), "from the host\n");
  await sandbox.writeConfig(`profile: tiny
diskGiB: 4
network:
  allowedHosts: [api.example.com]
  hostPorts: [${hostPort}]
  secrets:
    API_TOKEN: { from: 'env:PISB_VM_TEST_TOKEN', hosts: [api.example.com, 'host.sandbox.internal:${hostPort}'] }
    FILE_TOKEN: { from: 'file:token', hosts: [api.example.com] }
mounts:
  - { host: ./docs, guest: /mnt/docs }
setup:
  - mkdir -p /home/dev && printf '%s %s\\n' "$API_TOKEN" "$FILE_TOKEN" > /home/dev/.toolrc && cat /mnt/docs/readme.txt > /home/dev/copied.txt
`);
});

afterAll(async () => {
  await sandbox.call({ action: "dashboard", stop: true }).catch(() => undefined);
  expect(await teardown(sandbox)).toEqual([]);
  await new Promise((resolve) => hostService.close(resolve));
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
  const created = await demo({ action: "create", template: "base" });
  expect(created).toMatchObject({
    state: "running",
    secrets: [
      { name: "API_TOKEN", hosts: ["api.example.com", `host.sandbox.internal:${hostPort}`] },
      { name: "FILE_TOKEN", hosts: ["api.example.com"] },
    ],
    mounts: [{ host: join(sandbox.dir, "docs"), guest: "/mnt/docs" }],
  });

  const env = await demo({ action: "exec", cmd: 'printf "%s %s\\n" "$API_TOKEN" "$FILE_TOKEN"' });
  const placeholders = (env.output as string).trim();
  expect(placeholders).toMatch(/^PI_SANDBOX_SECRET_[0-9a-f]{40} PI_SANDBOX_SECRET_[0-9a-f]{40}$/);
  // What the template's setup stored still matches: the instance shares the template's placeholders.
  const saved = await demo({ action: "exec", cmd: "cat /home/dev/.toolrc /home/dev/copied.txt" });
  expect(saved.output).toBe(`${placeholders}\nfrom the host\n`);

  const mount = await demo({
    action: "exec",
    cmd: "cat /mnt/docs/readme.txt; touch /mnt/docs/new 2>&1; echo x >> /mnt/docs/readme.txt 2>&1; echo done",
  });
  expect(mount.output).toMatch(/^from the host\n.*Read-only file system\n.*Read-only file system\ndone\n$/s);
  expect(await readdir(join(sandbox.dir, "docs"))).toEqual(["readme.txt"]);

  const shell = await demo({ action: "shell" });
  const login = await runSsh(shell.command as string, `sh -lc 'printf "%s %s\\n" "$API_TOKEN" "$FILE_TOKEN"'`);
  expect(login).toEqual({ code: 0, stdout: `${placeholders}\n` });
  // HTTPS goes through the VM's TLS proxy: Node trusts its CA in an exec (the VM's environment
  // names it) and in a terminal (the profile `shell` writes), with nothing turned off. The
  // handshake is what is checked; the upstream's answer does not matter.
  await demo({ action: "write", path: "/tmp/tls.js", content: TLS_PROBE });
  // Node's first start in a TCG guest on a busy host can take longer than exec's default 10 s wait.
  const execTls = await demo({ action: "exec", cmd: "node /tmp/tls.js", timeoutMs: 60_000 });
  expect(execTls.output).toBe("tls ok\n");
  // The ledger has the request's decision (and, below, no value: the byte search covers its files).
  const refused = await demo({
    action: "exec",
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
      data: expect.objectContaining({ host: "not-allowed.example.org", allowed: false, rule: "nobody to ask" }),
    }),
  );
  expect(await runSsh(shell.command as string, "sh -lc 'node /tmp/tls.js'")).toEqual({ code: 0, stdout: "tls ok\n" });
  await demo({ action: "write", path: "/tmp/use.js", content: USE_SECRET });
  const used = await demo({ action: "exec", cmd: `node /tmp/use.js ${hostPort}`, timeoutMs: 60_000 });
  expect(used.output).toBe("host ok\nhost ok\n");
  // The host service got the value; the guest never had it.
  expect(received).toEqual([`Bearer ${ENV_VALUE}`, `Bearer ${ENV_VALUE}`]);
  // Transfers both ways, a tree and a single file each.
  await mkdir(join(sandbox.dir, "tree"));
  await writeFile(join(sandbox.dir, "tree", "a.txt"), "first\n");
  await writeFile(join(sandbox.dir, "tree", "b.txt"), "second\n");
  const up = await demo({ action: "upload", from: join(sandbox.dir, "tree"), to: "/tmp/tree" });
  const down = await demo({ action: "download", from: "/tmp/tree", to: join(sandbox.dir, "tree-back") });
  const one = await demo({ action: "download", from: "/home/dev/copied.txt", to: join(sandbox.dir, "copied.txt") });

  const guestEnviron = await demo({
    action: "exec",
    cmd: "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c _TOKEN=PI_SANDBOX_SECRET_; cat /proc/[0-9]*/environ 2>/dev/null | grep -c pisb-vm- || true",
  });
  const [withPlaceholder, withValue] = (guestEnviron.output as string).trim().split("\n").map(Number);
  expect(withPlaceholder).toBeGreaterThan(0);
  expect(withValue).toBe(0);

  // 100 % of it is in demo's ledger, counted against what the test did.
  const entries = (await sandbox.call({ action: "audit", name: "demo", last: 100_000 })).entries as LooseResult[];
  const of = (kind: string) => entries.filter((e) => e.kind === kind).map((e) => e.data as LooseResult);
  expect(of("action").map((d) => [d.action, d.caller, d.outcome])).toEqual(
    calls.map((c) => [c.action, "library", "ok"]),
  );
  expect(of("exec").map((d) => [d.cmd, d.exitCode])).toEqual(
    calls.filter((c) => c.action === "exec").map((c) => [c.cmd, 0]),
  );
  expect(of("transfer").map((d) => [d.direction, d.to, d.files, d.bytes])).toEqual([
    ["upload", "/tmp/tls.js", 1, Buffer.byteLength(TLS_PROBE)],
    ["upload", "/tmp/use.js", 1, Buffer.byteLength(USE_SECRET)],
    ["upload", up.to, 2, 13],
    ["download", down.to, 2, 13],
    ["download", one.to, 1, Buffer.byteLength("from the host\n")],
  ]);
  expect(of("transfer").map((d) => Boolean(d.sha256 ?? d.treeSha256))).toEqual([true, true, true, true, true]);
  // Each request the guest made over HTTP(S): the TLS probe from an exec and from the terminal,
  // and the refused one.
  const decisions = new Map<string, number>();
  for (const d of of("egress"))
    decisions.set(`${d.host} ${d.allowed}`, (decisions.get(`${d.host} ${d.allowed}`) ?? 0) + 1);
  expect(Object.fromEntries(decisions)).toEqual({ "api.example.com true": 2, "not-allowed.example.org false": 1 });
  expect(of("secret")).toEqual([
    { secret: "API_TOKEN", host: `host.sandbox.internal:${hostPort}` },
    { secret: "API_TOKEN", host: `host.sandbox.internal:${hostPort}` },
  ]);
  expect((await demo({ action: "stop" })).state).toBe("stopped");

  // What the dashboard serves: its page and scripts, the state, demo's ledger and controller log.
  const dashboard = await sandbox.call({ action: "dashboard" });
  const session = await fetch(dashboard.url as string, { redirect: "manual" });
  const cookie = session.headers.get("set-cookie")!.split(";")[0]!;
  const served: string[] = [];
  for (const path of ["/", "/app.js", "/timeline.js", "/api/state"]) {
    served.push(await (await fetch(new URL(path, dashboard.url as string), { headers: { cookie } })).text());
  }
  const timeline = `secret API_TOKEN put into a request to host.sandbox.internal:${hostPort}`;
  served.push(await streamUntil(new URL("/api/audit?name=demo", dashboard.url as string), cookie, timeline));
  served.push(await streamUntil(new URL("/api/logs?name=demo", dashboard.url as string), cookie, "event: lines"));
  expect(served.at(-2)).toContain(timeline);
  expect(served.at(-1)).toContain("event: lines");
  for (const text of served) expect([text.includes(ENV_VALUE), text.includes(FILE_VALUE)]).toEqual([false, false]);
  await sandbox.call({ action: "dashboard", stop: true });

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
