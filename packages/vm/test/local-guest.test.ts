// The local fake guest that host tests use in place of a VM: commands, streams, aborts and signal
// deaths as the real guest reports them, files under its root, TCP to host ports, and close.
import fs from "node:fs";
import fsp from "node:fs/promises";
import net from "node:net";
import path from "node:path";
import { isVmError } from "../src/index.js";
import { createLocalGuestVm, runInGuest, type LocalGuestVm } from "../src/testing.js";

let vm: LocalGuestVm;
beforeEach(async () => {
  vm = await createLocalGuestVm({ name: "fake" });
});
afterEach(async () => vm.close());

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function eventually(check: () => boolean, timeoutMs = 3000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return check();
}

test("string commands run through /bin/sh -lc with env and a cwd under the root", async () => {
  await fsp.mkdir(vm.hostPath("/work"), { recursive: true });
  const result = await runInGuest(vm, 'echo "$WHO in $(pwd)"; echo oops >&2; exit 4', {
    env: { WHO: "me" },
    cwd: "/work",
  });
  expect(result).toEqual({ exitCode: 4, stdout: `me in ${vm.hostPath("/work")}\n`, stderr: "oops\n" });
});

test("array commands run directly, and a missing program fails to start with a typed error", async () => {
  await expect(runInGuest(vm, ["/bin/echo", "a b"])).resolves.toMatchObject({ exitCode: 0, stdout: "a b\n" });
  await expect(vm.exec(["/no/such/program"]).result).rejects.toMatchObject({ code: "VM_EXEC_FAILED" });
});

test("stdin streams in and stdout streams out while the command runs", async () => {
  const execution = vm.exec('while read line; do echo "got $line"; done', { stdin: true });
  const lines: string[] = [];
  execution.stdout.setEncoding("utf8");
  execution.stdout.on("data", (chunk: string) => lines.push(chunk));
  execution.stdin!.write("one\n");
  expect(await eventually(() => lines.join("").includes("got one"))).toBe(true);
  execution.stdin!.end("two\n");
  await expect(execution.result).resolves.toEqual({ exitCode: 0 });
  expect(lines.join("")).toBe("got one\ngot two\n");
  await expect(runInGuest(vm, "cat", { stdin: "given\n" })).resolves.toMatchObject({ stdout: "given\n" });
});

test("abort kills the whole process group and rejects with the signal's reason", async () => {
  const controller = new AbortController();
  const execution = vm.exec("sleep 30 & echo $!; wait", { signal: controller.signal });
  const childPid = Number(
    await new Promise<string>((resolve) => execution.stdout.once("data", (d) => resolve(String(d)))),
  );
  expect(alive(childPid)).toBe(true);
  const reason = new Error("stop it");
  controller.abort(reason);
  await expect(execution.result).rejects.toBe(reason);
  expect(await eventually(() => !alive(childPid))).toBe(true);
});

test("an already aborted signal never starts the command", async () => {
  const marker = vm.hostPath("/ran");
  const execution = vm.exec(`touch ${marker}`, { signal: AbortSignal.abort(new Error("early")) });
  await expect(execution.result).rejects.toThrow("early");
  await new Promise((resolve) => setTimeout(resolve, 100));
  expect(fs.existsSync(marker)).toBe(false);
});

test("a signal death is reported like the guest does (128+n and the name)", async () => {
  await expect(runInGuest(vm, ["/bin/sh", "-c", "kill -TERM $$"])).resolves.toMatchObject({
    exitCode: 143,
    signal: "SIGTERM",
  });
});

test("files map guest absolute paths under the root", async () => {
  await fsp.mkdir(vm.hostPath("/etc"), { recursive: true });
  await vm.writeFile("/etc/app.conf", "x=1\n");
  expect(await fsp.readFile(path.join(vm.root, "etc/app.conf"), "utf8")).toBe("x=1\n");
  expect((await vm.readFile("/etc/app.conf")).toString()).toBe("x=1\n");
  await expect(vm.readFile("/etc/missing")).rejects.toMatchObject({ code: "VM_FILE_NOT_FOUND" });
  await expect(vm.writeFile("/no/parent/file", "x")).rejects.toMatchObject({ code: "VM_FILE_NOT_FOUND" });
  expect(vm.hostPath("/../../etc/passwd")).toBe(path.join(vm.root, "etc/passwd"));
});

test("connectTcp dials the host port, and reports a refused port with a typed error", async () => {
  const server = net.createServer((socket) => socket.end("hello from the guest port\n"));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  try {
    const stream = await vm.connectTcp(port);
    const text = await new Promise<string>((resolve) => {
      let data = "";
      stream.on("data", (chunk: Buffer) => (data += chunk.toString()));
      stream.on("end", () => resolve(data));
    });
    expect(text).toBe("hello from the guest port\n");
  } finally {
    server.close();
  }
  await expect(vm.connectTcp(port)).rejects.toMatchObject({ code: "VM_TCP_CONNECT_FAILED" });
  await expect(vm.connectTcp(0)).rejects.toMatchObject({ code: "VM_TCP_CONNECT_FAILED" });
  await expect(vm.connectTcp(port, { signal: AbortSignal.abort(new Error("nope")) })).rejects.toThrow("nope");
});

test("dropConnections cuts the connections connectTcp made that are still open", async () => {
  const server = net.createServer(() => undefined);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  try {
    const open = await vm.connectTcp(port);
    const ended = await vm.connectTcp(port);
    ended.destroy();
    await new Promise((resolve) => ended.once("close", resolve));
    const closed = new Promise((resolve) => open.once("close", resolve));
    expect(vm.dropConnections()).toBe(1);
    await closed;
    expect(vm.dropConnections()).toBe(0);
  } finally {
    server.close();
  }
});

test("SSH is unsupported on the fake", async () => {
  const error = await vm.enableSsh().catch((e: unknown) => e);
  expect(isVmError(error, "VM_UNSUPPORTED")).toBe(true);
});

test("close kills running commands, removes its temp root, and refuses more work", async () => {
  const execution = vm.exec("sleep 30");
  expect(vm.running).toBe(1);
  const root = vm.root;
  await vm.close();
  await expect(execution.result).resolves.toMatchObject({ signal: "SIGTERM" });
  expect(vm.closed).toBe(true);
  expect(fs.existsSync(root)).toBe(false);
  await expect(vm.exec("true").result).rejects.toMatchObject({ code: "VM_CLOSED" });
  await expect(vm.readFile("/x")).rejects.toMatchObject({ code: "VM_CLOSED" });
  await vm.close();
});

test("a caller-owned root is kept", async () => {
  const own = await createLocalGuestVm({ root: path.join(vm.root, "mine") });
  await own.close();
  expect(fs.existsSync(path.join(vm.root, "mine"))).toBe(true);
});
