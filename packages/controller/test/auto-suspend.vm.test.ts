// Auto-suspend on a real VM through the client API, one instance and one cold boot: a CPU loop and
// then an open WebSocket keep it up past `idle.suspendAfter`; unused, it suspends itself (no QEMU
// left, previews still bound); curl on its preview wakes it and gets the page; a background
// process lives on.
import { execFileSync } from "node:child_process";
import { list } from "../src/actions/list.js";
import { makeSandbox, qemuFor, sleep, teardown, type LooseResult, type Sandbox } from "../src/testing.js";

/** A WebSocket server in stdlib Python: greets with one text frame, holds the connection, answers a close. */
const WS_SERVER = `import base64, hashlib, os, socket, threading
def serve(c):
    data = b""
    while b"\\r\\n\\r\\n" not in data:
        chunk = c.recv(4096)
        if not chunk:
            return c.close()
        data += chunk
    keys = [l.split(b":", 1)[1].strip() for l in data.split(b"\\r\\n") if l.lower().startswith(b"sec-websocket-key:")]
    if not keys:
        c.sendall(b"HTTP/1.1 200 OK\\r\\ncontent-length: 2\\r\\nconnection: close\\r\\n\\r\\nws")
        return c.close()
    accept = base64.b64encode(hashlib.sha1(keys[0] + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nupgrade: websocket\\r\\nconnection: Upgrade\\r\\nsec-websocket-accept: " + accept + b"\\r\\n\\r\\n\\x81\\x02hi")
    while True:
        frame = c.recv(4096)
        if not frame or frame[0] & 0x0F == 8:
            break
    try:
        c.sendall(b"\\x88\\x00")
    except OSError:
        pass
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(os.environ["PORT"])))
s.listen(16)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
`;

let sandbox: Sandbox;
let call: Sandbox["call"];

beforeAll(async () => {
  sandbox = await makeSandbox("pai-");
  const wsScript = Buffer.from(WS_SERVER).toString("base64");
  await sandbox.writeConfig(`profile: tiny
diskGiB: 4
idle:
  suspendAfter: 10s
setup:
  - printf 'Hello from the guest\\n' > /workspace/index.html
  - echo ${wsScript} | base64 -d > /workspace/ws.py
services:
  web:
    command: python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
  ws:
    command: python3 ws.py
    preview: true
`);
  call = sandbox.call;
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

const exec = async (cmd: string) => (await call({ action: "exec", name: "nap", cmd })).output as string;
const inspect = () => call({ action: "inspect", name: "nap" });

/** Inspects until `done` holds (every second, at most `ms`); the last view either way. */
async function inspectUntil(done: (view: LooseResult) => boolean, ms: number): Promise<LooseResult> {
  let view = await inspect();
  for (const deadline = Date.now() + ms; !done(view) && Date.now() < deadline; view = await inspect())
    await sleep(1000);
  return view;
}

test("busy on its CPU or serving a WebSocket it stays up; unused it suspends itself, and curl on its preview wakes it with its processes", async () => {
  const created = await call({ action: "create", name: "nap", config: "sandbox.yaml" });
  expect(created.idle).toEqual({ suspendAfterMs: 10_000 });
  const [web, ws] = ["web", "ws"].map(
    (service) => created.previews.find((p: LooseResult) => p.service === service).url,
  );
  const sleeper = (await exec("sleep 1000 > /dev/null 2>&1 & echo $!")).trim();

  // A CPU loop the agent does not track (its exec returned): only the guest's CPU use shows it.
  const loop = (await exec("nohup sh -c 'while :; do :; done' > /dev/null 2>&1 & echo $!")).trim();
  await sleep(15_000);
  const spinning = await inspect();
  expect(spinning.state).toBe("running");
  expect(spinning.idle.busy).toMatch(/^the guest uses \d+ % CPU$/);

  // An open WebSocket through the preview, the loop ended: the socket alone keeps it up.
  const socket = new WebSocket(ws.replace(/^http/, "ws"));
  const greeting = await new Promise<string>((resolve, reject) => {
    socket.onmessage = (event) => resolve(String(event.data));
    socket.onerror = () => reject(new Error("the WebSocket failed"));
  });
  expect(greeting).toBe("hi");
  await exec(`kill ${loop}`);
  await sleep(15_000);
  const serving = await inspect();
  expect(serving.state).toBe("running");
  expect(serving.idle.busy).toBe("a preview request or WebSocket is open");

  // Unused: suspended by itself, no QEMU left, listed as suspended (idle).
  socket.close();
  const asleep = await inspectUntil((view) => view.idle?.suspended === true, 90_000);
  expect(asleep).toMatchObject({ state: "suspended", idle: { suspendAfterMs: 10_000, suspended: true } });
  expect(qemuFor(sandbox.home)).toEqual([]);
  const listed = await call({ action: "list" });
  expect(list.formatText!(listed as never)).toMatch(/\bnap\s+suspended \(idle\)/);

  // curl on the preview: answered once the instance is back, no error on the way.
  const started = Date.now();
  const page = execFileSync("curl", ["-sS", "--max-time", "120", "-w", "\n%{http_code} %{time_starttransfer}", web], {
    encoding: "utf8",
  });
  const [body, status] = page.split("\n").filter(Boolean);
  expect(body).toBe("Hello from the guest");
  expect(status).toMatch(/^200 /);
  process.stderr.write(`auto-suspend: first byte after ${status!.split(" ")[1]} s (${Date.now() - started} ms)\n`);
  // The request went on once the guest was back from memory; an action waits for the whole start.
  expect(await exec(`kill -0 ${sleeper} && echo alive`)).toBe("alive\n");
  expect(await inspect()).toMatchObject({ state: "running", restore: { warm: true } });
});
