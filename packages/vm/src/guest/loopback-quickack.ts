/**
 * Turns on immediate ACKs (the `quickack` route metric) for the guest's `local 127.0.0.1` route,
 * which every `connectTcp` stream uses: Gondolin's guest helper dials 127.0.0.1 for each stream.
 *
 * Why: most servers write a response's head and body separately and leave Nagle's algorithm on
 * (Python's http.server, many non-Node servers). On a reused connection the kernel holds the
 * second write until the first is ACKed, and the guest helper's socket, having just sent the
 * request, delays that ACK by 40 ms hoping to piggyback it. Every keep-alive request then waits
 * ~40 ms. A fresh connection does not (the kernel ACKs at once early in a connection), which is
 * why one connection per request looked faster. With `quickack` on the route, loopback peers ACK
 * at once and kept-alive connections cost only their round trip. For loopback traffic inside the
 * guest the extra ACK packets cost next to nothing.
 *
 * The change lasts until the guest reboots (or `lo` is reconfigured). It is one netlink request
 * (RTM_NEWROUTE, replace) written in Python, because python3 is in every image the product
 * supports while iproute2's `ip` is not (busybox `ip` has no `quickack`). Equivalent to
 * `ip route change local 127.0.0.1 dev lo proto kernel scope host src 127.0.0.1 table local quickack 1`.
 */
export const LOOPBACK_QUICKACK_SCRIPT = [
  "import os, socket, struct, sys",
  "def attr(kind, data):",
  '    return struct.pack("=HH", 4 + len(data), kind) + data + bytes(-len(data) % 4)',
  'ip = socket.inet_aton("127.0.0.1")',
  // rtmsg: AF_INET, /32, table local (255), proto kernel (2), scope host (254), type local (2).
  'route = struct.pack("=BBBBBBBBI", socket.AF_INET, 32, 0, 0, 255, 2, 254, 2, 0)',
  // RTA_DST, RTA_PREFSRC, RTA_OIF (lo), RTA_METRICS { RTAX_QUICKACK = 1 }.
  'route += attr(1, ip) + attr(7, ip) + attr(4, struct.pack("=i", socket.if_nametoindex("lo")))',
  'route += attr(8, attr(15, struct.pack("=I", 1)))',
  // nlmsghdr: RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_REPLACE.
  'message = struct.pack("=IHHII", 16 + len(route), 24, 0x1 | 0x4 | 0x100, 1, 0) + route',
  "link = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)",
  "link.bind((0, 0))",
  "link.send(message)",
  "reply = link.recv(4096)",
  'kind, = struct.unpack_from("=H", reply, 4)',
  'error, = struct.unpack_from("=i", reply, 16)',
  "if kind != 2 or error != 0:",
  '    sys.exit("quickack on the loopback route failed: " + (os.strerror(-error) if error else "reply type %d" % kind))',
].join("\n");

/** The exec argv that applies {@link LOOPBACK_QUICKACK_SCRIPT} (python3 found through PATH). */
export const LOOPBACK_QUICKACK_ARGV: readonly string[] = [
  "/bin/sh",
  "-c",
  'exec python3 -c "$1"',
  "sh",
  LOOPBACK_QUICKACK_SCRIPT,
];
