// Two instances side by side in one state root found through $XDG_STATE_HOME, driven through the
// client as a user would, each with its own daemon process and QEMU: killing one daemon (or
// stopping it with SIGSTOP) leaves the other's previews serving, a page of one may not post to the
// other's previews, and a stop cuts an open terminal (ssh into the guest). What the daemon does
// with services, previews and hooks: side-by-side.local.test.ts. Each is its own machine (hostname,
// machine-id).
import { spawn, type ChildProcess } from "node:child_process";
import { stat } from "node:fs/promises";
import { join } from "node:path";
import { callAction } from "../src/client/index.js";
import { fetchText, makeSandbox, qemuFor, qemuGone, teardown, type LooseResult, type Sandbox } from "../src/testing.js";
import { twoServicesYaml } from "./support/two-services.js";

const APP_YAML = twoServicesYaml("/workspace/app.py");

const PEER_YAML = `profile: tiny
diskGiB: 4
services:
  web:
    command: exec python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
`;

let sandbox: Sandbox;
let call: Sandbox["call"];
let peerCreated: Promise<LooseResult>;

const urlOf = (view: LooseResult, service: string): string =>
  (view.previews as { service: string; url: string }[]).find((p) => p.service === service)!.url;

beforeAll(async () => {
  const base = await makeSandbox("psx-");
  // The state root comes from $XDG_STATE_HOME: no PI_SANDBOX_HOME.
  const { PI_SANDBOX_HOME: _unset, ...inherited } = base.env;
  const env = { ...inherited, XDG_STATE_HOME: join(base.dir, "xdg") };
  sandbox = {
    ...base,
    home: join(base.dir, "xdg", "pi-sandbox"),
    env,
    call: (action, options = {}) => callAction(action, { env, cwd: base.dir, ...options }) as Promise<LooseResult>,
  };
  call = sandbox.call;
  await sandbox.writeConfig(APP_YAML, "app.yaml");
  await sandbox.writeConfig(PEER_YAML, "peer.yaml");
  const app = await call({ action: "create", name: "app", config: "app.yaml" });
  expect(app.state).toBe("running");
  // peer boots while the first tests run.
  peerCreated = call({ action: "create", name: "peer", config: "peer.yaml" });
  peerCreated.catch(() => undefined);
});

afterAll(async () => {
  await peerCreated?.catch(() => undefined);
  expect(await teardown(sandbox)).toEqual([]);
});

test("the state root is $PI_SANDBOX_HOME, else $XDG_STATE_HOME/pi-sandbox, else ~/.local/state/pi-sandbox", async () => {
  const { dir, env } = sandbox;
  const home = join(dir, "home");
  const list = (extra: Record<string, string>, drop: string[] = []) => {
    const e: NodeJS.ProcessEnv = { ...env, HOME: home, ...extra };
    for (const key of drop) delete e[key];
    return callAction({ action: "list" }, { env: e, cwd: dir }) as Promise<LooseResult>;
  };
  const names = (r: LooseResult) => (r.instances as { name: string }[]).map((i) => i.name);
  expect(names(await list({}))).toContain("app");
  expect(await list({ PI_SANDBOX_HOME: join(dir, "own") })).toMatchObject({ instances: [] });
  expect((await stat(join(dir, "own"))).mode & 0o777).toBe(0o700);
  expect(await list({}, ["XDG_STATE_HOME"])).toMatchObject({ instances: [] });
  expect((await stat(join(home, ".local", "state", "pi-sandbox"))).mode & 0o777).toBe(0o700);
  expect(qemuFor(join(sandbox.home, "runtime")).length).toBeGreaterThan(0);
});

test("a daemon under SIGSTOP reads unavailable with its pid; after SIGCONT it reads running", async () => {
  expect((await peerCreated).state).toBe("running");
  const { daemonPid } = await call({ action: "inspect", name: "peer" });
  process.kill(daemonPid, "SIGSTOP");
  try {
    const paused = await call({ action: "inspect", name: "peer" });
    expect(paused.state).toBe("unavailable");
    expect(paused.hint).toContain(String(daemonPid));
  } finally {
    process.kill(daemonPid, "SIGCONT");
  }
  expect((await call({ action: "inspect", name: "peer" })).state).toBe("running");
});

test("two instances from one image are two machines: each has its name as hostname and a machine-id of its own", async () => {
  expect((await peerCreated).state).toBe("running");
  const identity = async (name: string) => {
    const res = await call({ action: "exec", name, cmd: "hostname; cat /etc/hostname /etc/machine-id" });
    return res.output.split("\n");
  };
  const [app, peer] = [await identity("app"), await identity("peer")];
  expect(app.slice(0, 2)).toEqual(["app", "app"]);
  expect(peer.slice(0, 2)).toEqual(["peer", "peer"]);
  expect(app[2]).toMatch(/^[0-9a-f]{32}$/);
  expect(peer[2]).toMatch(/^[0-9a-f]{32}$/);
  expect(app[2]).not.toBe(peer[2]);
});

test("killing peer's daemon takes its QEMU and leaves app's previews serving; a page of one may not post to the other's", async () => {
  const peer = await peerCreated;
  expect(peer.state).toBe("running");
  const peerWeb = urlOf(peer, "web");
  expect(await fetchText(peerWeb)).toMatch(/^200 /);
  const { daemonPid } = await call({ action: "inspect", name: "peer" });
  const app = await call({ action: "inspect", name: "app" });
  process.kill(daemonPid, "SIGKILL");
  expect(await qemuGone(join(sandbox.home, "instances", "peer"), 10_000)).toEqual([]);
  expect((await call({ action: "inspect", name: "peer" })).state).toBe("interrupted");
  await expect(fetch(peerWeb)).rejects.toThrow();
  expect(await fetchText(urlOf(app, "web"))).toMatch(/^200 web uses /);
  expect(await fetchText(urlOf(app, "api"))).toBe("200 api says hi\n");
  // A page of one instance may not post to another instance's preview.
  const cross = await fetch(urlOf(app, "api"), {
    method: "POST",
    body: "{}",
    headers: { Origin: new URL(peerWeb).origin },
  });
  expect(cross.status).toBe(403);
});

test("stop cuts an open terminal session", async () => {
  const shell = await call({ action: "shell", name: "app" }, { caller: "user" });
  const session: ChildProcess = spawn(
    "sh",
    ["-c", `${shell.command} -o BatchMode=yes -o ConnectTimeout=60 -o LogLevel=ERROR 'echo connected; sleep 600'`],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const exited = new Promise<number | null>((resolve) => session.once("exit", (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    session.stdout!.on("data", (chunk: Buffer) => {
      if (chunk.toString().includes("connected")) resolve();
    });
    session.once("exit", (code) => reject(new Error(`ssh exited before connecting (${code})`)));
  });
  await call({ action: "stop", name: "app" });
  let timer: NodeJS.Timeout | undefined;
  const code = await Promise.race([
    exited,
    new Promise<"still open">((resolve) => (timer = setTimeout(() => resolve("still open"), 30_000))),
  ]);
  clearTimeout(timer);
  if (code === "still open") session.kill("SIGKILL");
  expect(code).not.toBe("still open");
  expect(code).not.toBe(0);
  expect(await qemuGone(join(sandbox.home, "instances", "app"), 10_000)).toEqual([]);
});
