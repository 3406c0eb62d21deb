// The SSH forwarder without a VM: a host TCP echo server stands in for the guest's sshd.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { readFile, stat, writeFile } from "node:fs/promises";
import { connect, createServer, type Server, type Socket } from "node:net";
import path from "node:path";
import { isVmError } from "../src/index.js";
import { parseHostKeys, SshForwarder, type SshForwarderOptions } from "../src/guest/ssh-forwarder.js";
import { refused, tempDir } from "./support/helpers.js";

const KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHrm0vLr6lDcgq9l6R1x3bE8bqX4dOMwzvS5bmDRJ8Hl";

let echo: Server;
let echoPort: number;
const echoSockets = new Set<Socket>();

beforeAll(async () => {
  echo = createServer((socket) => {
    echoSockets.add(socket);
    socket.once("close", () => echoSockets.delete(socket));
    socket.pipe(socket);
  });
  await new Promise<void>((resolve) => echo.listen(0, "127.0.0.1", resolve));
  echoPort = (echo.address() as { port: number }).port;
});

afterAll(async () => {
  for (const socket of echoSockets) socket.destroy();
  await new Promise<void>((resolve) => echo.close(() => resolve()));
});

function options(extra: Partial<SshForwarderOptions> = {}): SshForwarderOptions {
  return {
    user: "root",
    privateKey: "-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n-----END OPENSSH PRIVATE KEY-----\n",
    hostKeys: [KEY],
    connect: () =>
      new Promise((resolve, reject) => {
        const socket = connect(echoPort, "127.0.0.1", () => resolve(socket));
        socket.once("error", reject);
      }),
    idleTimeoutMs: 60_000,
    ...extra,
  };
}

/** Opens a client connection to the forwarder and checks a byte round trip. */
async function session(port: number): Promise<Socket> {
  const socket = connect(port, "127.0.0.1");
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  const echoed = new Promise<string>((resolve) => socket.once("data", (chunk: Buffer) => resolve(chunk.toString())));
  socket.write("ping");
  expect(await echoed).toBe("ping");
  return socket;
}

async function until(check: () => Promise<boolean> | boolean, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("host keys keep only the key type and blob of each line", () => {
  const text = [
    `${KEY} root@guest`,
    "@cert-authority * ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHrm",
    "*,evil.example ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC",
    "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTY= comment with spaces",
    "ssh-ed25519 not-base64!",
    "",
  ].join("\n");
  expect(parseHostKeys(text)).toEqual([KEY, "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTY="]);
});

test("the command pins the host key for the forwarder's port, with private key files", async () => {
  const forwarder = await SshForwarder.open(options());
  try {
    expect(forwarder.command).toBe(
      `ssh -p ${forwarder.port} -F none -i ${forwarder.identityFile} -o IdentitiesOnly=yes -o IdentityAgent=none ` +
        `-o ForwardAgent=no -o ForwardX11=no -o ClearAllForwardings=yes ` +
        `-o UserKnownHostsFile=${forwarder.knownHostsFile} -o GlobalKnownHostsFile=/dev/null ` +
        `-o UpdateHostKeys=no -o StrictHostKeyChecking=yes root@127.0.0.1`,
    );
    expect(await readFile(forwarder.knownHostsFile, "utf8")).toBe(`[127.0.0.1]:${forwarder.port} ${KEY}\n`);
    const dir = path.dirname(forwarder.identityFile);
    expect(((await stat(dir)).mode & 0o777).toString(8)).toBe("700");
    expect(((await stat(forwarder.identityFile)).mode & 0o777).toString(8)).toBe("600");
    await session(forwarder.port).then((socket) => socket.destroy());
  } finally {
    await forwarder.close();
  }
  expect(existsSync(path.dirname(forwarder.identityFile))).toBe(false);
  expect(await refused(forwarder.port)).toBe(true);
});

test("a user's ssh config cannot add X11 or agent forwarding, a proxy or a local command to the printed command", async () => {
  // ssh finds ~/.ssh/config through the passwd entry, not $HOME, so a temp HOME would not be
  // read at all; an earlier -F stands in for it (ssh keeps the last -F), and -G prints the
  // configuration ssh would use without connecting.
  const { dir, cleanup } = await tempDir("pisb-sshconfig-");
  const forwarder = await SshForwarder.open(options({ user: "dev" }));
  try {
    const hostile = path.join(dir, "config");
    await writeFile(
      hostile,
      [
        "Host *",
        "  ForwardX11 yes",
        "  ForwardAgent yes",
        "  IdentityAgent /tmp/agent.sock",
        "  IdentityFile ~/.ssh/id_other",
        "  ProxyCommand nc %h %p",
        "  PermitLocalCommand yes",
        "  LocalCommand touch /tmp/pwned",
        "  LocalForward 9999 localhost:80",
        "  ControlMaster auto",
        "  ControlPath /tmp/cm-%C",
        "  SendEnv AWS_*",
        "  StrictHostKeyChecking no",
        "",
      ].join("\n"),
    );
    // Through a shell, as a user pasting the printed command would run it.
    const printed = execFileSync("/bin/sh", ["-c", forwarder.command.replace(/^ssh /, `ssh -G -F ${hostile} `)], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    });
    const settings = new Map<string, string[]>();
    for (const line of printed.trim().split("\n")) {
      const [key, ...value] = line.split(" ");
      settings.set(key!, [...(settings.get(key!) ?? []), value.join(" ")]);
    }
    expect(Object.fromEntries([...settings].filter(([key]) => WATCHED.includes(key)))).toEqual({
      user: ["dev"],
      hostname: ["127.0.0.1"],
      port: [String(forwarder.port)],
      identityfile: [forwarder.identityFile],
      identitiesonly: ["yes"],
      identityagent: ["none"],
      forwardagent: ["no"],
      forwardx11: ["no"],
      clearallforwardings: ["yes"],
      permitlocalcommand: ["no"],
      controlmaster: ["false"],
      stricthostkeychecking: ["true"],
      userknownhostsfile: [forwarder.knownHostsFile],
      globalknownhostsfile: ["/dev/null"],
      updatehostkeys: ["false"],
    });
  } finally {
    await forwarder.close();
    await cleanup();
  }
});

/** The `ssh -G` keys the hostile config above tries to change, and the ones the command sets. */
const WATCHED = [
  "user",
  "hostname",
  "port",
  "identityfile",
  "identitiesonly",
  "identityagent",
  "forwardagent",
  "forwardx11",
  "clearallforwardings",
  "permitlocalcommand",
  "localcommand",
  "proxycommand",
  "localforward",
  "controlmaster",
  "controlpath",
  "sendenv",
  "stricthostkeychecking",
  "userknownhostsfile",
  "globalknownhostsfile",
  "updatehostkeys",
];

test("with no session open the forwarder and its key files go after the idle timeout", async () => {
  let closedBy = 0;
  const forwarder = await SshForwarder.open(options({ idleTimeoutMs: 300, onClose: () => closedBy++ }));
  const dir = path.dirname(forwarder.identityFile);
  // A session longer than the timeout keeps it open.
  const socket = await session(forwarder.port);
  await new Promise((r) => setTimeout(r, 600));
  expect(forwarder.closed).toBe(false);
  expect(forwarder.sessionCount).toBe(1);
  socket.destroy();
  await until(() => forwarder.closed, 2_000);
  // The idle close has begun; close() hands back that same close, which ends with onClose.
  await forwarder.close();
  expect(existsSync(dir)).toBe(false);
  expect(await refused(forwarder.port)).toBe(true);
  expect(closedBy).toBe(1);
});

test("an unused forwarder goes after the idle timeout; keepAlive restarts the countdown", async () => {
  const forwarder = await SshForwarder.open(options({ idleTimeoutMs: 400 }));
  await new Promise((r) => setTimeout(r, 250));
  forwarder.keepAlive();
  await new Promise((r) => setTimeout(r, 250));
  expect(forwarder.closed).toBe(false);
  await until(() => forwarder.closed, 2_000);
  expect(await refused(forwarder.port)).toBe(true);
});

test("close cuts open sessions and is idempotent", async () => {
  const forwarder = await SshForwarder.open(options());
  const socket = await session(forwarder.port);
  const cut = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  await Promise.all([forwarder.close(), forwarder.close()]);
  await cut;
  expect(forwarder.closed).toBe(true);
});

test("no host key to pin is VM_SSH_FAILED and leaves nothing behind", async () => {
  const error = await SshForwarder.open(options({ hostKeys: [] })).catch((e: unknown) => e);
  expect(isVmError(error, "VM_SSH_FAILED")).toBe(true);
});
