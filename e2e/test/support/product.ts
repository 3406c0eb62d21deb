// Drives pi-sandbox as a user does: a short temp dir holding sandbox.yaml and a private state root,
// every action through @pi-sandbox/controller/client (the daemon runs from the package's dist/).
import { execFileSync } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { callAction, type CallActionOptions } from "@pi-sandbox/controller/client";
import { testImage } from "../support.js";

export interface Sandbox {
  /** Holds sandbox.yaml and state/. */
  dir: string;
  /** The state root ($PI_SANDBOX_HOME). */
  home: string;
  env: NodeJS.ProcessEnv;
  /** Calls one action; results are loose JSON. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- results are loose JSON in tests
  call: (action: Record<string, unknown>, options?: CallActionOptions) => Promise<Record<string, any>>;
  /** Writes `<dir>/<file>` with `version: 1`, the image line and `body`. */
  writeConfig: (body: string, file?: string, image?: string) => Promise<string>;
}

/** A sandbox in `/tmp/<prefix>XXXXXX` (or under `parent`), with its state root inside. */
export async function makeSandbox(prefix: string, parent = "/tmp"): Promise<Sandbox> {
  const dir = await mkdtemp(join(parent, prefix));
  const home = join(dir, "state");
  const env = { ...process.env, PI_SANDBOX_HOME: home };
  return {
    dir,
    home,
    env,
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- results are loose JSON in tests
    call: (action, options = {}) => callAction(action, { env, cwd: dir, ...options }) as Promise<Record<string, any>>,
    writeConfig: async (body, file = "sandbox.yaml", image = testImage()) => {
      const path = join(dir, file);
      await writeFile(path, `version: 1\nimage: ${image}\n${body}`);
      return path;
    },
  };
}

/** PIDs of QEMU processes whose command line mentions `needle` (e.g. a state root). */
export function qemuFor(needle: string): number[] {
  try {
    return execFileSync("pgrep", ["-f", `qemu-system.*${needle}`], { encoding: "utf8" })
      .split("\n")
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

/** Waits up to `ms` for every QEMU of `needle` to be gone; returns those left. */
export async function qemuGone(needle: string, ms = 15_000): Promise<number[]> {
  const deadline = Date.now() + ms;
  while (qemuFor(needle).length > 0 && Date.now() < deadline) await sleep(200);
  return qemuFor(needle);
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Stops every running instance, then removes the sandbox dir unless `keep`. Best effort. */
export async function teardown(sandbox: Sandbox | undefined, options: { keep?: boolean } = {}): Promise<number[]> {
  if (!sandbox) return [];
  const list = await sandbox.call({ action: "list" }).catch(() => ({ instances: [] }));
  await Promise.all(
    (list.instances as { name: string; state: string }[])
      .filter((v) => v.state === "running" || v.state === "starting" || v.state === "stopping")
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
  if (!options.keep) await rm(sandbox.dir, { recursive: true, force: true });
  return left;
}

/** GET `url` and return "status body". */
export async function fetchText(url: string): Promise<string> {
  const res = await fetch(url, { signal: AbortSignal.timeout(60_000) });
  return `${res.status} ${await res.text()}`;
}
