// Guest root attacks the host through the pipes of the agent's channel (its bridge exec, which the
// host keeps when the agent's TCP door cannot be reached, as here with loopback down): 48 MiB
// of one endless line into the bridge's stderr, then into its reply pipe. The host's memory must
// stay bounded, the client must fail with AGENT_PROTOCOL (not crash, not hang), and a new client on
// the same VM must work. Bounded means bounded growth: a host that kept the line would grow by at
// least its size, so 48 MiB each against a growth limit of 36 MiB proves the line is neither kept
// nor accumulated. The host legitimately holds up to MAX_AGENT_LINE_BYTES (about 6.4 MiB) of a
// line, and a run here grows by 15-19 MiB; more bytes would only cost time, since every byte
// crosses Gondolin's exec channel at a few MB/s under TCG.
import { SupervisorClient, type SupervisorError } from "../src/index.js";
import { bootTestVm, runInGuest, type TestVm } from "@pi-sandbox/vm/testing";

const FLOOD_BYTES = 48 * 1024 * 1024;
const RSS_LIMIT = 400 * 1024 * 1024;
const RSS_GROWTH_LIMIT = 36 * 1024 * 1024;
const AGENT = { workspace: "/workspace", agentArgs: ["--warm-shell", "off"] };

let testVm: TestVm | undefined;
let peakRss = 0;
let sampler: NodeJS.Timeout | undefined;

beforeAll(async () => {
  testVm = await bootTestVm("sup-hostile");
  // With the guest's loopback down the agent's TCP door cannot be reached, so the host's session
  // stays on the bridge exec whose pipes this test floods (else it moves to the door at once).
  await runInGuest(testVm.vm, "ip link set lo down");
  sampler = setInterval(() => (peakRss = Math.max(peakRss, process.memoryUsage().rss)), 50);
});

afterAll(async () => {
  clearInterval(sampler);
  await testVm?.close();
});

/** Floods one of the agent's fds from a separate root exec; resolves when the writer is done. */
function flood(pid: number, fd: number) {
  return runInGuest(testVm!.vm, [
    "/bin/sh",
    "-c",
    `head -c ${FLOOD_BYTES} /dev/zero | tr '\\0' x > /proc/${pid}/fd/${fd}; echo "exit $?"`,
  ]);
}

/** The pid of the agent's bridge (the exec the host talks to; the agent daemon behind it has no pipes to the host). */
async function bridgePid(): Promise<number> {
  // "--[a]ttach" matches the bridge's command line but not this script's own.
  const script =
    "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q -- '--[a]ttach' && echo ${p#/proc/}; done";
  const found = await runInGuest(testVm!.vm, ["/bin/sh", "-c", script]);
  const pids = found.stdout.split("\n").filter(Boolean).map(Number);
  expect(pids).toHaveLength(1);
  return pids[0]!;
}

/** The bridge's reply pipe: the one write-only pipe it holds other than stderr. */
async function replyFd(pid: number): Promise<number> {
  const script = [
    'err=$(readlink /proc/$0/fd/2); for f in /proc/$0/fd/*; do n=${f##*/}; t=$(readlink "$f") || continue',
    'case "$t" in pipe:*) ;; *) continue ;; esac; [ "$t" = "$err" ] && continue',
    'flags=$(sed -n "s/^flags:[[:space:]]*//p" /proc/$0/fdinfo/$n); [ $(( 0$flags & 3 )) -eq 1 ] && echo $n; done',
  ].join("\n");
  const found = await runInGuest(testVm!.vm, ["/bin/sh", "-c", script, String(pid)]);
  const fds = found.stdout.split("\n").filter(Boolean).map(Number);
  expect(fds).toHaveLength(1);
  return fds[0]!;
}

test("48 MiB on the stderr and reply pipe of the agent's bridge: bounded host memory, AGENT_PROTOCOL, a new client works", async () => {
  const client = await SupervisorClient.start({ vm: testVm!.vm, ...AGENT });
  const pid = await bridgePid();
  const fd = await replyFd(pid);

  // stderr: kept to its tail, logged within a budget; the channel stays usable.
  const baseRss = process.memoryUsage().rss;
  peakRss = baseRss;
  const noisy = await flood(pid, 2);
  expect(noisy.stdout).toContain("exit 0");
  expect((await client.exec("echo still-here")).output).toBe("still-here\n");
  expect(peakRss).toBeLessThan(RSS_LIMIT);
  expect(peakRss - baseRss).toBeLessThan(RSS_GROWTH_LIMIT);

  // The reply pipe: the first line passes the host's bound, the channel closes with AGENT_PROTOCOL.
  const closed = new Promise<SupervisorError>((resolve) => client.onClosed(resolve));
  const pending = client.exec("sleep 600", { timeoutMs: 60_000 }).catch((e: unknown) => e);
  const writer = flood(pid, fd);
  const reason = await closed;
  expect(reason.code).toBe("AGENT_PROTOCOL");
  expect(await pending).toBe(reason);
  await expect(client.ping()).rejects.toBe(reason);
  await writer; // the rest is read and dropped (or the writer is cut off when the agent goes)
  process.stderr.write(
    `hostile-guest: RSS ${Math.round(baseRss / 2 ** 20)} MiB before, peak ${Math.round(peakRss / 2 ** 20)} MiB\n`,
  );
  expect(peakRss).toBeLessThan(RSS_LIMIT);
  expect(peakRss - baseRss).toBeLessThan(RSS_GROWTH_LIMIT);
  await client.close();
  expect(client.closedReason).toBe(reason);

  const again = await SupervisorClient.start({ vm: testVm!.vm, ...AGENT });
  try {
    // The agent itself outlived the cut channel; a new bridge reaches it.
    expect(again.hello.pid).toBe(client.hello.pid);
    expect((await again.exec("echo fresh")).output).toBe("fresh\n");
  } finally {
    await again.close();
  }
  expect(peakRss).toBeLessThan(RSS_LIMIT);
}, 900_000);
