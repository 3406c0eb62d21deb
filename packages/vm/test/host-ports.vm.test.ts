// `network.hostPorts` on one real VM: the guest reaches the listed ports of the host's 127.0.0.1
// as host.sandbox.internal:<port>, over plain TCP as well as HTTP, and nothing else of the host:
// not an unlisted port by the same name, not a listed port by the gateway address or another of
// the host's addresses. A listed port where nothing listens fails at once instead of hanging.
//
// Host servers listen on 0.0.0.0 where the test needs them reachable at the host's other
// addresses too, so that "unreachable" means the policy stopped the flow, not that nothing was
// there. The host's resolver is never asked: this file answers `dns.lookup` itself.
import { createHash } from "node:crypto";
import dns from "node:dns";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { DiskStore, runInGuest, startVm, type RunningVm } from "../src/index.js";
import { tempDir } from "./support/helpers.js";
import { loopbackLookup, sh, testImage, vmOptions } from "./support/vm-support.js";

const NAME = "host.sandbox.internal";
/** Gondolin's gateway, where it maps the host's 127.0.0.1 for HTTP. */
const GATEWAY = "192.168.127.1";

let root: string;
let cleanup: () => Promise<void>;
let vm: RunningVm;
const originalLookup = dns.lookup;
const lookups: string[] = [];
const servers: net.Server[] = [];
/** What each host server saw: HTTP request paths, or raw connections. */
const seen = {
  web: [] as string[],
  webAuth: [] as string[],
  unlisted: [] as string[],
  unlistedAccepts: 0,
  allowed: [] as string[],
  keyed: [] as string[],
};
const seenByBanner = { accepts: 0 };
const ports = { web: 0, echo: 0, digest: 0, banner: 0, dead: 0, unlisted: 0, allowed: 0, keyed: 0 };
/** The key the keyed host service wants, and the secret the guest has a placeholder of. */
const KEY = {
  value: "sk-host-only-7f3a9c1e5b",
  rotated: "sk-host-only-rotated-2d8e",
  placeholder: "PI_SANDBOX_SECRET_hostports0123",
};
let keyWanted = KEY.value;

/** Listens on `host` with an OS-chosen port and returns it. */
async function listen(server: net.Server, host: string): Promise<number> {
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return (server.address() as net.AddressInfo).port;
}

/** A port on 127.0.0.1 where nothing listens (bound, then closed). */
async function deadPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** The host's first non-loopback IPv4 address, if it has one. */
function hostAddress(): string | undefined {
  for (const list of Object.values(os.networkInterfaces())) {
    for (const entry of list ?? []) if (entry.family === "IPv4" && !entry.internal) return entry.address;
  }
  return undefined;
}

beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir("pisb-hostports-"));
  // Listed: an HTTP server (also reachable at the host's other addresses), a line echo and a
  // digest server (plain TCP, client speaks first), a server that speaks first, a dead port.
  ports.web = await listen(
    http.createServer((req, res) => {
      if (req.headers.authorization) seen.webAuth.push(req.headers.authorization);
      else seen.web.push(`${req.url} from ${req.socket.remoteAddress}`);
      res.end(`host service at ${req.url}`);
    }),
    "0.0.0.0",
  );
  // Listed, and wants a key: a model server run with key checks.
  ports.keyed = await listen(
    http.createServer((req, res) => {
      seen.keyed.push(`${req.url} ${req.headers.authorization === `Bearer ${keyWanted}` ? "key" : "no key"}`);
      if (req.headers.authorization !== `Bearer ${keyWanted}`) {
        res.writeHead(401).end("a key is needed");
        return;
      }
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: first\n\n");
      setTimeout(() => res.end("data: done\n\n"), 200);
    }),
    "127.0.0.1",
  );
  ports.echo = await listen(
    net.createServer((socket) => {
      socket.on("error", () => undefined);
      socket.setEncoding("latin1");
      let buffered = "";
      socket.on("data", (chunk: string) => {
        buffered += chunk;
        for (let at = buffered.indexOf("\n"); at >= 0; at = buffered.indexOf("\n")) {
          socket.write(`echo ${buffered.slice(0, at)}\n`);
          buffered = buffered.slice(at + 1);
        }
      });
    }),
    "127.0.0.1",
  );
  ports.digest = await listen(
    net.createServer((socket) => {
      socket.on("error", () => undefined);
      const hash = createHash("sha256");
      let bytes = 0;
      socket.on("data", (chunk: Buffer) => {
        bytes += chunk.length;
        hash.update(chunk);
      });
      socket.on("end", () => socket.end(`${bytes} ${hash.digest("hex")}\n`));
    }),
    "127.0.0.1",
  );
  ports.banner = await listen(
    net.createServer((socket) => {
      seenByBanner.accepts++;
      socket.on("error", () => undefined);
      socket.end("banner from the host\n");
    }),
    "127.0.0.1",
  );
  ports.dead = await deadPort();
  // Not listed: an HTTP server on every address, which would answer anything that reached it.
  const unlisted = http.createServer((req, res) => {
    seen.unlisted.push(req.url ?? "");
    res.end("unlisted");
  });
  unlisted.on("connection", () => seen.unlistedAccepts++);
  ports.unlisted = await listen(unlisted, "0.0.0.0");
  // The HTTP allow-list, unchanged by host ports: a listed name resolving to the host.
  ports.allowed = await listen(
    http.createServer((req, res) => {
      seen.allowed.push(req.url ?? "");
      res.end("allowed");
    }),
    "127.0.0.1",
  );
  (dns as { lookup: unknown }).lookup = loopbackLookup(new Set(["pisb-allowed.test"]), lookups);

  const stateRoot = path.join(root, "state");
  const diskDir = path.join(root, "disk");
  await new DiskStore({ stateRoot }).createDisk(diskDir, { image: testImage(), diskGiB: 2 });
  const options = vmOptions("hostports", diskDir, stateRoot, { allowedInternalHosts: ["pisb-allowed.test"] });
  vm = await startVm({
    ...options,
    spec: {
      ...options.spec,
      network: {
        allowedHosts: ["pisb-allowed.test"],
        hostPorts: [ports.web, ports.echo, ports.digest, ports.banner, ports.dead, ports.keyed],
        secrets: {
          MODEL_KEY: { value: KEY.value, placeholder: KEY.placeholder, hosts: [`${NAME}:${ports.keyed}`] },
        },
      },
    },
  });
  await vm.writeFile("/tmp/egress-probe.py", fs.readFileSync(new URL("./support/egress-probe.py", import.meta.url)));
});

afterAll(async () => {
  await vm?.close();
  (dns as { lookup: unknown }).lookup = originalLookup;
  for (const server of servers) server.close();
  await cleanup?.();
});

type Probe = { kind: "tcp"; host: string; port: number; send?: string; timeout?: number };

/** Runs the probes in the guest (in parallel) and returns their outcomes in order. */
async function probe(probes: Probe[]): Promise<string[]> {
  const result = await runInGuest(vm, ["python3", "/tmp/egress-probe.py", JSON.stringify(probes)]);
  if (result.exitCode !== 0) throw new Error(`egress-probe.py failed (${result.exitCode}): ${result.stderr}`);
  return JSON.parse(result.stdout) as string[];
}

/** curl in the guest: status (or 000), body, exit code and curl's own total time in seconds. */
async function curl(url: string, hostHeader?: string) {
  const header = hostHeader ? ["-H", `Host: ${hostHeader}`] : [];
  const format = "\n%{http_code} %{time_total}";
  const result = await runInGuest(vm, ["curl", "-sS", "-m", "20", "-w", format, ...header, url]);
  const at = result.stdout.lastIndexOf("\n");
  const [status, seconds] = result.stdout.slice(at + 1).split(" ");
  return {
    status,
    body: result.stdout.slice(0, at),
    exitCode: result.exitCode,
    seconds: Number(seconds),
    stderr: result.stderr,
  };
}

test("the name resolves in the guest, and a listed port's HTTP server answers curl", async () => {
  const address = (await sh(vm, `getent ahostsv4 ${NAME}`)).split(/\s/)[0]!;
  // One synthetic address per name (Gondolin's per-host mode), not the shared 192.0.2.1.
  expect(address).toMatch(/^198\.19\.\d+\.\d+$/);
  const other = (await sh(vm, "getent ahostsv4 other.sandbox.internal")).split(/\s/)[0]!;
  expect(other).toMatch(/^198\.19\.\d+\.\d+$/);
  expect(other).not.toBe(address);

  const reply = await curl(`http://${NAME}:${ports.web}/hello`);
  expect(reply).toMatchObject({ status: "200", body: "host service at /hello", exitCode: 0 });
  expect(seen.web).toEqual(["/hello from 127.0.0.1"]);
  expect((await curl(`http://HOST.Sandbox.Internal:${ports.web}/any-case`)).status).toBe("200");
  expect(lookups).not.toContain(NAME); // mapped by Gondolin, never resolved on the host
});

test("plain TCP passes both ways, also to a server that speaks first", async () => {
  const outcomes = await probe([
    { kind: "tcp", host: NAME, port: ports.echo, send: "ping over raw tcp\n" },
    // Gondolin alone would dial the host only at the guest's first byte (dialMappedTcpOnConnect).
    { kind: "tcp", host: NAME, port: ports.banner },
  ]);
  expect(outcomes).toEqual(["recv:echo ping over raw tcp\n", "recv:banner from the host\n"]);
  expect(seenByBanner.accepts).toBe(1);

  // 8 MiB up, a digest back: bytes arrive whole and in order, and the half-close passes.
  const upload = [
    "import hashlib, socket",
    `s = socket.create_connection(("${NAME}", ${ports.digest}), timeout=60)`,
    "data = bytes(range(256)) * (8 * 4096)",
    "s.sendall(data)",
    "s.shutdown(socket.SHUT_WR)",
    "reply = b''",
    "while not reply.endswith(b'\\n'):",
    "    chunk = s.recv(4096)",
    "    if not chunk: break",
    "    reply += chunk",
    "print(reply.decode().strip() == '%d %s' % (len(data), hashlib.sha256(data).hexdigest()), reply.decode().strip())",
  ].join("\n");
  const result = await runInGuest(vm, ["python3", "-c", upload]);
  expect(result.stderr).toBe("");
  expect(result.stdout).toMatch(/^True 8388608 [0-9a-f]{64}\n$/);
});

test("an unlisted port is unreachable by the name and by the gateway address", async () => {
  const outcomes = await probe([
    { kind: "tcp", host: NAME, port: ports.unlisted, send: "raw bytes\n" },
    { kind: "tcp", host: GATEWAY, port: ports.unlisted, send: "raw bytes\n" },
    // A listed port is mapped by the name only, not by the address Gondolin maps for HTTP.
    { kind: "tcp", host: GATEWAY, port: ports.echo, send: "ping\n" },
    { kind: "tcp", host: "other.sandbox.internal", port: ports.echo, send: "ping\n" },
  ]);
  expect(outcomes).toEqual(["reset", "reset", "reset", "reset"]);
  // HTTP goes by the Host header, and neither the name nor the gateway is on the allow-list.
  expect((await curl(`http://${NAME}:${ports.unlisted}/by-name`)).status).toBe("403");
  expect((await curl(`http://${GATEWAY}:${ports.unlisted}/by-gateway`)).status).toBe("403");
  expect((await curl(`http://${GATEWAY}:${ports.web}/listed-by-gateway`)).status).toBe("403");
  expect(seen.unlisted).toEqual([]);
  expect(seen.unlistedAccepts).toBe(0);
  expect(seen.web.filter((line) => line.startsWith("/listed-by-gateway"))).toEqual([]);
});

test("the host's other addresses are unreachable, on listed and unlisted ports", async () => {
  const address = hostAddress();
  const targets = [
    ...(address ? [address] : []),
    "10.0.2.2", // QEMU user networking's host alias: nothing in Gondolin's network
    "172.17.0.1", // Docker's bridge
  ];
  const outcomes = await probe(
    targets.flatMap((host) => [
      { kind: "tcp" as const, host, port: ports.web, send: `GET / HTTP/1.0\r\nHost: ${host}:${ports.web}\r\n\r\n` },
      { kind: "tcp" as const, host, port: ports.unlisted, send: "raw bytes\n" },
    ]),
  );
  // HTTP to an address is refused by Gondolin's HTTP policy (403), anything else is reset.
  for (const outcome of outcomes) expect(outcome).toMatch(/^(reset|recv:HTTP\/1\.[01] 403 )/);
  if (address) expect((await curl(`http://${address}:${ports.web}/by-address`)).status).toBe("403");
  expect(seen.web.filter((line) => line.startsWith("/by-address"))).toEqual([]);
  expect(seen.unlistedAccepts).toBe(0);
  // The HTTP allow-list works as before next to host ports.
  expect((await curl(`http://pisb-allowed.test:${ports.allowed}/allowed`)).status).toBe("200");
  expect(seen.allowed).toEqual(["/allowed"]);
});

test("a listed port with nothing listening fails at once, not after a timeout", async () => {
  const started = performance.now();
  const reply = await curl(`http://${NAME}:${ports.dead}/`);
  const hostMs = performance.now() - started;
  expect(reply.status).toBe("000");
  expect(reply.exitCode).not.toBe(0);
  expect(reply.exitCode).not.toBe(28); // curl's timeout
  // The host refused, so Gondolin resets the guest's connection as soon as it opened: curl
  // usually sees that while it connects ("Couldn't connect to server", exit 7), and sometimes just
  // after, when asking for the peer's address ("Transport endpoint is not connected", exit 55).
  expect(reply.stderr).toMatch(/reset|refused|Couldn't connect|Empty reply|not connected/i);
  expect(reply.seconds).toBeLessThan(10);
  // A client that waits for the server to speak learns it as fast as one that sends.
  const raw = await probe([
    { kind: "tcp", host: NAME, port: ports.dead, send: "hello\n", timeout: 10 },
    { kind: "tcp", host: NAME, port: ports.dead, timeout: 10 },
  ]);
  for (const outcome of raw) expect(outcome).toMatch(/^(reset|eof|connect-failed:ECONN(RESET|REFUSED))$/);
  process.stdout.write(
    `[host-ports] dead listed port: curl exit ${reply.exitCode} after ${reply.seconds.toFixed(3)} s in the guest (${Math.round(hostMs)} ms with the exec)\n`,
  );
});

test("a secret for one host port: the keyed service gets the value, the guest only the placeholder", async () => {
  const keyed = (args: string) =>
    runInGuest(vm, [
      "/bin/sh",
      "-c",
      `curl -sS -m 20 -w '\n%{http_code}' ${args} http://${NAME}:${ports.keyed}/v1/chat`,
    ]);
  const answer = await keyed('-N -H "Authorization: Bearer $MODEL_KEY"');
  expect(answer.stdout).toBe("data: first\n\ndata: done\n\n\n200");
  expect((await keyed("")).stdout).toBe("a key is needed\n401");
  expect(seen.keyed).toEqual(["/v1/chat key", "/v1/chat no key"]);

  // Sent to a listed port the secret does not name, the placeholder stays a placeholder.
  await runInGuest(vm, [
    "/bin/sh",
    "-c",
    `curl -sS -m 20 -H "Authorization: Bearer $MODEL_KEY" http://${NAME}:${ports.web}/`,
  ]);
  expect(seen.webAuth).toEqual([`Bearer ${KEY.placeholder}`]);

  const environ = await runInGuest(vm, ["/bin/sh", "-c", "env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'"]);
  expect(environ.stdout).toContain(`MODEL_KEY=${KEY.placeholder}`);
  expect(environ.stdout + answer.stdout + answer.stderr).not.toContain(KEY.value);

  // A rotated value reaches the service from the next request on.
  vm.updateSecret("MODEL_KEY", KEY.rotated);
  keyWanted = KEY.rotated;
  expect((await keyed('-H "Authorization: Bearer $MODEL_KEY"')).stdout).toMatch(/\n200$/);
});
