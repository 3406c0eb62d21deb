import { execFileSync } from "node:child_process";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction, type CallActionOptions } from "../src/client/index.js";

/** A private state root and a sandbox.yaml pointing at the test image. */
export async function makeSandbox(
  yamlBody: string,
): Promise<{ dir: string; env: NodeJS.ProcessEnv; configPath: string }> {
  const image = process.env.PI_SANDBOX_TEST_IMAGE;
  if (!image) throw new Error("PI_SANDBOX_TEST_IMAGE is not set: run through jest's globalSetup");
  // Short paths: daemon sockets live under the state root.
  const dir = await mkdtemp(join(tmpdir(), "pst-"));
  const configPath = join(dir, "sandbox.yaml");
  await writeFile(configPath, `version: 1\nimage: ${image}\n${yamlBody}`);
  return { dir, env: { ...process.env, PI_SANDBOX_HOME: join(dir, "state") }, configPath };
}

/** Calls an action with the sandbox's env; resolves with the result as a loose record. */
export function caller(env: NodeJS.ProcessEnv, cwd: string) {
  return (action: Record<string, unknown>, options: CallActionOptions = {}) =>
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- results are loose JSON in tests
    callAction(action, { env, cwd, ...options }) as Promise<Record<string, any>>;
}

/** QEMU processes whose command line mentions `needle` (e.g. a state root). */
export function qemuProcessesFor(needle: string): number[] {
  let out = "";
  try {
    out = execFileSync("pgrep", ["-f", `qemu-system.*${needle}`], { encoding: "utf8" });
  } catch {
    return [];
  }
  return out.split("\n").filter(Boolean).map(Number);
}

/** Stops every instance of a state root (best effort), for afterAll. */
export async function stopAll(env: NodeJS.ProcessEnv, cwd: string): Promise<void> {
  const call = caller(env, cwd);
  const { instances } = await call({ action: "list" }).catch(() => ({ instances: [] }));
  for (const view of instances as { name: string; state: string }[]) {
    if (view.state === "running" || view.state === "starting")
      await call({ action: "stop", name: view.name }).catch(() => undefined);
  }
}
