// A supervisor over the local fake guest for host tests: the real agent runs as a host python3
// process in temporary directories, with helpers to wait for conditions and check processes.
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLocalGuestVm, type LocalGuestVm } from "@pi-sandbox/vm/testing";
import { SupervisorClient, type AgentEvent, type StartSupervisorOptions } from "../../src/index.js";

/** A supervisor over the local fake guest: the agent is host python3, state and workspace in temp dirs. */
export interface LocalSupervisor {
  vm: LocalGuestVm;
  client: SupervisorClient;
  root: string;
  workspace: string;
  stateDir: string;
  events: AgentEvent[];
  /** Starts a second client (a "reopen") on the same dirs after closing the first. */
  reopen(): Promise<SupervisorClient>;
  writeYaml(text: string): Promise<void>;
  close(): Promise<void>;
}

export async function startLocal(
  options: {
    agentArgs?: string[];
    root?: string;
    /** The agent's whole environment (default: this process's). */
    env?: Record<string, string | undefined>;
    /** The host port `connectTcp` dials for a guest port (default: the same). */
    portMap?: (guestPort: number) => number;
  } & Partial<StartSupervisorOptions> = {},
): Promise<LocalSupervisor> {
  const root = options.root ?? (await mkdtemp(join(tmpdir(), "pisb-sup-")));
  const workspace = join(root, "workspace");
  const stateDir = join(root, "state");
  await mkdir(workspace, { recursive: true });
  const vm = await createLocalGuestVm({
    root: join(root, "guest-root"),
    ...(options.env ? { env: options.env } : {}),
    ...(options.portMap ? { portMap: options.portMap } : {}),
  });
  const events: AgentEvent[] = [];
  const start = async () => {
    const client = await SupervisorClient.start({
      vm,
      workspace,
      stateDir,
      agentPath: join(root, "agent", "sandbox_agent.pyz"),
      agentArgs: ["--shell", "/bin/sh", ...(options.agentArgs ?? [])],
      ...(options.logger ? { logger: options.logger } : {}),
    });
    client.onEvent((event) => events.push(event));
    return client;
  };
  const handle: LocalSupervisor = {
    vm,
    client: await start(),
    root,
    workspace,
    stateDir,
    events,
    async reopen() {
      await handle.client.close();
      handle.client = await start();
      return handle.client;
    },
    async writeYaml(text: string) {
      await writeFile(join(workspace, ".sandbox.yaml"), text);
    },
    async close() {
      await handle.client.close();
      await vm.close();
      await rm(root, { recursive: true, force: true });
    },
  };
  return handle;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it returns a value other than undefined/false, or fails after `timeoutMs`. */
export async function waitFor<T>(
  check: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 10_000,
  what = "condition",
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** True when a host process exists and is not a zombie. */
export async function processAlive(pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

export async function listDir(path: string): Promise<string[]> {
  try {
    return await readdir(path);
  } catch {
    return [];
  }
}
