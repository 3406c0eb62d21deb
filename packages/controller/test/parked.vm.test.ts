// Parked instances on a real VM through the client, one cold boot: an instance that suspended
// itself (idle.suspendAfter) is parked, its daemon gone and the state root's waker holding its
// preview; curl on the preview wakes it with its processes; parked again, an action wakes it; parked
// again, stop ends it, and the waker, holding nothing, exits.
import { execFileSync } from "node:child_process";
import { list } from "../src/actions/list.js";
import {
  daemonsFor,
  makeSandbox,
  qemuFor,
  sleep,
  teardown,
  until,
  wakersFor,
  type LooseResult,
  type Sandbox,
} from "../src/testing.js";

let sandbox: Sandbox;
let call: Sandbox["call"];

beforeAll(async () => {
  sandbox = await makeSandbox("ppk-");
  // Parking waits a quiet spell after the suspend (30 s); what this file proves is the hand-over.
  sandbox.env.PI_SANDBOX_DAEMON_IDLE_EXIT_MS = "5000";
  await sandbox.writeConfig(`profile: tiny
diskGiB: 4
idle:
  suspendAfter: 10s
setup:
  - printf 'Hello from the guest\\n' > /workspace/index.html
services:
  web:
    command: python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
`);
  call = sandbox.call;
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

const exec = async (cmd: string, progress?: string[]) =>
  (
    await call(
      { action: "exec", name: "nap", cmd },
      progress ? { onProgress: (e) => progress.push(`[${e.stage}] ${e.message}`) } : {},
    )
  ).output as string;
const inspect = () => call({ action: "inspect", name: "nap" });

/** Inspects every second until the instance is parked (suspended by idle, no daemon); that view. */
async function untilParked(): Promise<LooseResult> {
  let view = await inspect();
  await until(
    () => `nap parked; last seen ${JSON.stringify({ state: view.state, idle: view.idle, daemonPid: view.daemonPid })}`,
    async () => {
      view = await inspect();
      return view.idle?.suspended === true && view.daemonPid === undefined;
    },
    180_000,
    1000,
  );
  return view;
}

test("parked, an instance costs no daemon: curl on its preview wakes it, an action wakes it, stop ends it", async () => {
  const created = await call({ action: "create", name: "nap", config: "sandbox.yaml" });
  expect(created.idle).toEqual({ suspendAfterMs: 10_000 });
  const url = created.previews[0].url as string;
  const sleeper = (await exec("sleep 1000 > /dev/null 2>&1 & echo $!")).trim();

  // Unused: it suspends itself, its daemon hands the preview to the waker and exits.
  const parked = await untilParked();
  expect(parked).toMatchObject({ state: "suspended", previews: [{ url }] });
  expect(qemuFor(sandbox.home)).toEqual([]);
  expect(daemonsFor(sandbox.home)).toEqual([]);
  expect(wakersFor(sandbox.home)).toHaveLength(1);
  const listed = await call({ action: "list" });
  expect(list.formatText!(listed as never)).toMatch(/\bnap\s+suspended \(idle\)/);

  // curl on the preview: the waker starts the daemon, which takes the port back and resumes the guest.
  const started = Date.now();
  const page = execFileSync("curl", ["-sS", "--max-time", "120", "-w", "\n%{http_code} %{time_starttransfer}", url], {
    encoding: "utf8",
  });
  const [body, status] = page.split("\n").filter(Boolean);
  expect(body).toBe("Hello from the guest");
  expect(status).toMatch(/^200 /);
  process.stderr.write(`parked: first byte after ${status!.split(" ")[1]} s (${Date.now() - started} ms)\n`);
  expect(await exec(`kill -0 ${sleeper} && echo alive`)).toBe("alive\n");
  expect(await inspect()).toMatchObject({ state: "running", restore: { warm: true } });

  // Parked again: an action starts a daemon (as start would) that resumes it first.
  await untilParked();
  const progress: string[] = [];
  expect(await exec("echo awake", progress)).toBe("awake\n");
  expect(progress).toContain("[boot] resuming nap (suspended while unused) for exec");

  // Parked again: stop drops the saved memory; nothing is held any more, and the waker exits.
  await untilParked();
  expect(await call({ action: "stop", name: "nap" })).toMatchObject({ state: "stopped", previews: [] });
  await until(
    "the daemon and the waker to exit",
    () => [...daemonsFor(sandbox.home), ...wakersFor(sandbox.home)].length === 0,
    30_000,
    200,
  );
  await expect(fetch(url)).rejects.toThrow();
  await sleep(0);
});
