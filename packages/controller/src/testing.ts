// Test support for suites that drive pi-sandbox as a user does: a short temp dir holding
// sandbox.yaml files and a private state root, every action through the client (so the daemon
// runs from this package's dist/), and helpers to check that no QEMU outlives a test.
// Not part of the product's API; used by this package's, pi-extension's and e2e's real-VM tests.
import { execFileSync } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { callAction, type CallActionOptions } from "./client/index.js";

export {
  createLocalRuntime,
  type LocalRuntime,
  type LocalRuntimeHooks,
  type LocalRuntimeVm,
} from "./testing-runtime.js";
export { InstanceController } from "./daemon/instance.js";
export { createVmRuntime } from "./daemon/runtime.js";
/** For a host-side fake HTTPS API behind `createVmRuntime`'s `upstream` seam (review-setup may not import vm). */
export { selfSignedCert } from "@pi-sandbox/vm/testing";
export { runDaemon } from "./daemon/server.js";
export { createFileLogger } from "./log.js";
export { CLI, REMOTE_USER, sshRemote, type SshRemote } from "./testing-ssh.js";

/** Loose JSON result of an action, as tests read it. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- results are loose JSON in tests
export type LooseResult = Record<string, any>;

/**
 * The seed README's sandbox.yaml, shrunk to the `tiny` profile and a 4 GiB disk for tests: setup
 * writes a page and a Python web server previews it. Without the `version:`/`image:` lines
 * ({@link Sandbox.writeConfig} adds them).
 */
export const SEED_YAML = `profile: tiny
diskGiB: 4
setup:
  - printf 'Hello from the guest\\n' > /workspace/index.html
services:
  web:
    command: python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
`;

export interface Sandbox {
  /** Holds the sandbox.yaml files and state/. */
  dir: string;
  /** The state root ($PI_SANDBOX_HOME). */
  home: string;
  env: NodeJS.ProcessEnv;
  /** Calls one action from `dir` with `env`. */
  call: (action: Record<string, unknown>, options?: CallActionOptions) => Promise<LooseResult>;
  /** Writes `<dir>/<file>` with `version: 1`, an `image:` line and `body`; returns its path. */
  writeConfig: (body: string, file?: string, image?: string) => Promise<string>;
}

/** The guest assets directory a jest globalSetup put into PI_SANDBOX_TEST_IMAGE. */
export function testImage(): string {
  const dir = process.env.PI_SANDBOX_TEST_IMAGE;
  if (!dir)
    throw new Error(
      "PI_SANDBOX_TEST_IMAGE is not set: run real-VM suites through their jest config (its globalSetup builds the image)",
    );
  return dir;
}

/**
 * A sandbox in `<parent>/<prefix>XXXXXX` with its state root inside. Keep `parent` short: the
 * daemons' unix sockets live under the state root.
 */
export async function makeSandbox(prefix: string, parent = "/tmp"): Promise<Sandbox> {
  const dir = await mkdtemp(join(parent, prefix));
  const home = join(dir, "state");
  const env = { ...process.env, PI_SANDBOX_HOME: home };
  return {
    dir,
    home,
    env,
    call: (action, options = {}) => callAction(action, { env, cwd: dir, ...options }) as Promise<LooseResult>,
    writeConfig: async (body, file = "sandbox.yaml", image = testImage()) => {
      const path = join(dir, file);
      await writeFile(path, `version: 1\nimage: ${image}\n${body}`);
      return path;
    },
  };
}

/** PIDs of QEMU processes whose command line mentions `needle` (e.g. a state root). */
export function qemuFor(needle: string): number[] {
  return pgrep(`qemu-system.*${needle}`);
}

/** PIDs of controller daemons serving the state root `home`. */
export function daemonsFor(home: string): number[] {
  return pgrep(`--root ${home} --kind`);
}

/** PIDs of the waker of the state root `home` (it holds parked instances' previews). */
export function wakersFor(home: string): number[] {
  return pgrep(`waker/main.js --root ${home} --socket`);
}

function pgrep(pattern: string): number[] {
  try {
    return execFileSync("pgrep", ["-f", "--", pattern], { encoding: "utf8" }).split("\n").filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Resolves once `check()` is true, polling every `intervalMs`; after `ms` throws "timed out
 * waiting for <what>" (`what` may be a function, to describe what was seen by then).
 */
export async function until(
  what: string | (() => string),
  check: () => boolean | Promise<boolean>,
  ms = 120_000,
  intervalMs = 100,
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${typeof what === "string" ? what : what()}`);
    await sleep(intervalMs);
  }
}

/** Waits up to `ms` for every QEMU of `needle` to be gone; returns those left. */
export async function qemuGone(needle: string, ms = 15_000): Promise<number[]> {
  return gone(() => qemuFor(needle), ms);
}

async function gone(find: () => number[], ms: number): Promise<number[]> {
  const deadline = Date.now() + ms;
  while (find().length > 0 && Date.now() < deadline) await sleep(200);
  return find();
}

/**
 * Stops every live instance, SIGKILLs any QEMU still left after that, then removes the sandbox
 * dir unless `keep`. Best effort; returns the QEMU pids that had to be killed.
 */
export async function teardown(sandbox: Sandbox | undefined, options: { keep?: boolean } = {}): Promise<number[]> {
  if (!sandbox) return [];
  const list = await sandbox.call({ action: "list" }).catch(() => ({ instances: [] }));
  await Promise.all(
    (list.instances as { name: string; state: string; idle?: { suspended?: boolean } }[])
      // One that suspended itself keeps its previews bound (by its daemon or the waker) until stopped.
      .filter((v) => ["running", "starting", "stopping", "suspending"].includes(v.state) || v.idle?.suspended)
      .map((v) => sandbox.call({ action: "stop", name: v.name }).catch(() => undefined)),
  );
  const left = await qemuGone(sandbox.home);
  for (const pid of left) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
  // A daemon answers `stop` before it exits, and writes its last log lines and removes its socket
  // after that: removing the state root under it races (ENOTEMPTY), so wait for the daemons too.
  // The waker exits once it holds nothing for a few seconds.
  await gone(() => [...daemonsFor(sandbox.home), ...wakersFor(sandbox.home)], 20_000);
  if (!options.keep) await rm(sandbox.dir, { recursive: true, force: true, maxRetries: 5 });
  return left;
}

/** GET `url` and return "status body". */
export async function fetchText(url: string): Promise<string> {
  const res = await fetch(url, { signal: AbortSignal.timeout(60_000) });
  return `${res.status} ${await res.text()}`;
}
