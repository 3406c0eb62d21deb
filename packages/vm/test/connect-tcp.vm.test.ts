// connectTcp streams against real guest servers: the tail of a stream read late, an upload larger
// than Gondolin's shared ingress queue, and keep-alive exchanges with a server that leaves
// Nagle's algorithm on, and a stream whose QEMU dies. One VM for the file (~10-30 s boot under TCG).
import { createHash } from "node:crypto";
import { performance } from "node:perf_hooks";
import type { Duplex } from "node:stream";
import { pipeline } from "node:stream/promises";
import { runInGuest, type GuestExecution } from "../src/index.js";
import { bootTestVm, type TestVm } from "../src/testing/test-vm.js";

const TAIL_PORT = 9101;
const SINK_PORT = 9102;
const NAGLE_PORT = 9103;
const NODELAY_PORT = 9104;
const TAIL_BYTES = 2 * 1024 * 1024;

// Plain sockets and threads, so each server does exactly what its test needs.
const SERVERS = `
import hashlib, socket, threading

def serve(port, handle, nodelay=False):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    def accept():
        while True:
            conn, _ = listener.accept()
            if nodelay:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=handle, args=(conn,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()

def tail(conn):
    conn.sendall(bytes(range(256)) * ${TAIL_BYTES / 256})
    conn.close()

def sink(conn):
    digest, total = hashlib.sha256(), 0
    while True:
        data = conn.recv(1 << 20)
        if not data:
            break
        digest.update(data)
        total += len(data)
    conn.sendall(("%d %s" % (total, digest.hexdigest())).encode())
    conn.close()

def http(conn):
    pending = b""
    while True:
        data = conn.recv(65536)
        if not data:
            conn.close()
            return
        pending += data
        while b"\\r\\n\\r\\n" in pending:
            _, pending = pending.split(b"\\r\\n\\r\\n", 1)
            # Head and body in two writes, as Python's http.server and many others do.
            conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 5\\r\\n\\r\\n")
            conn.sendall(b"hello")

serve(${TAIL_PORT}, tail)
serve(${SINK_PORT}, sink)
serve(${NAGLE_PORT}, http)
serve(${NODELAY_PORT}, http, nodelay=True)
print("listening", flush=True)
threading.Event().wait()
`;

let testVm: TestVm;
let servers: GuestExecution;

beforeAll(async () => {
  testVm = await bootTestVm("connect-tcp");
  await testVm.vm.writeFile("/tmp/servers.py", SERVERS);
  servers = testVm.vm.exec(["python3", "/tmp/servers.py"]);
  servers.result.catch(() => undefined);
  servers.stderr.resume();
  await new Promise<void>((resolve, reject) => {
    servers.stdout.setEncoding("utf8").on("data", (text: string) => text.includes("listening") && resolve());
    servers.result.then((status) => reject(new Error(`guest servers exited: ${JSON.stringify(status)}`)), reject);
  });
});

afterAll(async () => {
  await testVm?.close();
});

/** Reads `stream` to its end; rejects if it closes without `end`. */
function readAll(stream: Duplex): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.once("end", () => resolve(Buffer.concat(chunks)));
    stream.once("error", reject);
    stream.once("close", () => reject(new Error("the stream closed without end")));
  });
}

async function until(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

test("a stream read only after the guest closed it still delivers every byte, then end", async () => {
  const stream = await testVm.vm.connectTcp(TAIL_PORT);
  // Nobody reads while the guest sends everything and closes.
  await until(() => stream.readableLength >= TAIL_BYTES, "the guest's bytes");
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  expect(stream.destroyed).toBe(false);
  const body = await readAll(stream);
  expect(body.length).toBe(TAIL_BYTES);
  expect(body.equals(Buffer.from(Array.from({ length: TAIL_BYTES }, (_, i) => i % 256)))).toBe(true);
});

test("an upload larger than Gondolin's 64 MiB ingress queue, written in 8 MiB buffers, arrives whole", async () => {
  const piece = Buffer.alloc(8 * 1024 * 1024);
  for (let i = 0; i < piece.length; i += 4) piece.writeUInt32LE(i, i);
  const pieces = 9; // 72 MiB
  const expected = createHash("sha256");
  for (let i = 0; i < pieces; i++) expected.update(piece);

  const stream = await testVm.vm.connectTcp(SINK_PORT);
  const reply = readAll(stream);
  await pipeline(async function* () {
    for (let i = 0; i < pieces; i++) yield piece;
  }, stream);
  expect((await reply).toString()).toBe(`${pieces * piece.length} ${expected.digest("hex")}`);
}, 600_000);

test("kept-alive exchanges with a server that leaves Nagle on cost no more than with TCP_NODELAY", async () => {
  // connectTcp tunes the guest's loopback once per boot, in the background: wait for it.
  (await testVm.vm.connectTcp(NODELAY_PORT)).destroy();
  await until(
    async () => (await runInGuest(testVm.vm, "ip route show table local")).stdout.includes("quickack 1"),
    "quickack on the loopback route",
  );

  const exchange = (stream: Duplex) =>
    new Promise<number>((resolve, reject) => {
      const started = performance.now();
      let text = "";
      const onData = (chunk: Buffer) => {
        text += chunk.toString("latin1");
        if (!text.endsWith("hello")) return;
        stream.off("data", onData).off("error", reject);
        resolve(performance.now() - started);
      };
      stream.on("data", onData).once("error", reject);
      stream.write("GET / HTTP/1.1\r\nHost: guest\r\n\r\n");
    });
  const nagle = await testVm.vm.connectTcp(NAGLE_PORT);
  const nodelay = await testVm.vm.connectTcp(NODELAY_PORT);
  const times = { nagle: [] as number[], nodelay: [] as number[] };
  try {
    // Interleaved, so load from other work on the host hits both alike; the first rounds warm up.
    for (let round = 0; round < 25; round++) {
      const a = await exchange(nagle);
      const b = await exchange(nodelay);
      if (round >= 3) {
        times.nagle.push(a);
        times.nodelay.push(b);
      }
    }
  } finally {
    nagle.destroy();
    nodelay.destroy();
  }
  const median = (values: number[]) => [...values].sort((x, y) => x - y)[Math.floor(values.length / 2)]!;
  // Without immediate ACKs every reused exchange with the Nagle server waits for a 40 ms delayed ACK.
  expect(median(times.nagle)).toBeLessThan(median(times.nodelay) + 20);
});

// Last: it ends the file's VM.
test("an open stream ends with VM_CLOSED when QEMU dies under it", async () => {
  const stream = await testVm.vm.connectTcp(SINK_PORT); // the sink answers only once the stream ends
  const ended = new Promise<unknown>((resolve) => {
    stream.once("error", resolve);
    stream.once("close", () => resolve("closed without an error"));
  });
  stream.resume();
  stream.write("still here");
  process.kill(testVm.vm.hostPid!, "SIGKILL");
  const late = new Promise((resolve) => setTimeout(() => resolve("still open after 30 s"), 30_000).unref());
  await expect(Promise.race([ended, late])).resolves.toMatchObject({ code: "VM_CLOSED" });
  expect(testVm.vm.closed).toBe(true);
});
