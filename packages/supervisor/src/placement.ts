// Where the guest agent goes and how it runs (its placement), and what lets the image's init start
// it while the guest boots: the kernel word naming the agent the host wants, and a new disk's seed.
import fsp from "node:fs/promises";
import path from "node:path";
import { writeFileAtomic } from "@pi-sandbox/config";
import {
  SEED_ARCHIVE,
  SEED_SCRIPT,
  agentArchiveHash,
  agentSeedScript,
  bootKeyOf,
  type AgentPlacement,
} from "./launch.js";
import type { AgentPlacementOptions } from "./options.js";

/** Guest directory the agent keeps its state in (on the root disk, not a tmpfs). */
export const DEFAULT_AGENT_STATE_DIR = "/var/lib/pi-sandbox-agent";
/** Guest path of the agent zipapp, (re)installed whenever it is missing or not this host's. */
export const DEFAULT_AGENT_PATH = "/usr/local/lib/pi-sandbox/sandbox_agent.pyz";
/**
 * Guest path at which a VM shares the seed of {@link writeAgentSeed} (read-only). The image's init
 * looks there (its rootfs.mjs names the same path) when the disk has no agent of its own.
 */
export const AGENT_SEED_PATH = "/run/pi-sandbox-agent-seed";

/** Where the agent goes and how it runs, from the start options (their defaults filled in). */
export function placementOf(options: AgentPlacementOptions): AgentPlacement & { workspace: string; stateDir: string } {
  const workspace = options.workspace ?? "/workspace";
  const stateDir = options.stateDir ?? DEFAULT_AGENT_STATE_DIR;
  return {
    workspace,
    stateDir,
    agentPath: options.agentPath ?? DEFAULT_AGENT_PATH,
    python: options.python ?? "python3",
    // A bridge to the agent daemon (started at boot or by the first bridge), which outlives the channel.
    args: ["--attach", "--state-dir", stateDir, "--workspace", workspace, ...(options.agentArgs ?? [])],
  };
}

/**
 * The guest kernel command-line word (`pi_sandbox.agent=KEY`, for `kernelArgs` of the VM's start)
 * that lets the image's init start the agent daemon while the guest boots, when the disk holds
 * the daemon `SupervisorClient.start` with the same options would run: it saves the host's
 * wait for two Python starts after the guest is ready. A guest without that daemon, or an image
 * without the init hook, ignores it.
 */
export async function agentBootArgument(options: AgentPlacementOptions = {}): Promise<string> {
  const { sha256 } = await agentArchiveHash();
  return `pi_sandbox.agent=${bootKeyOf(sha256, placementOf(options))}`;
}

/**
 * Writes the seed that lets the image's init start the agent daemon at a disk's first boot, when
 * the disk has no agent yet (a new instance or template): the agent archive and a script, in
 * `<parentDir>/<key>/`, named by the key of {@link agentBootArgument} with the same options (so
 * one seed serves every disk that wants this agent placed this way, and its files never change
 * once written). Returns that directory, for the VM to share read-only at {@link AGENT_SEED_PATH}
 * (with the kernel word). A guest whose disk holds an agent, or an image without the hook,
 * ignores it. Seeds of other keys in `parentDir` that nobody wrote for a day are removed.
 */
export async function writeAgentSeed(parentDir: string, options: AgentPlacementOptions = {}): Promise<string> {
  const { archive, sha256 } = await agentArchiveHash();
  const placement = placementOf(options);
  const key = bootKeyOf(sha256, placement);
  const dir = path.join(parentDir, key);
  await fsp.mkdir(dir, { recursive: true, mode: 0o700 });
  // Each file whole or not at all: two daemons may write one seed at once.
  await writeFileAtomic(path.join(dir, SEED_ARCHIVE), archive, 0o644);
  await writeFileAtomic(path.join(dir, SEED_SCRIPT), agentSeedScript(placement, sha256, key), 0o644);
  await pruneSeeds(parentDir, key);
  return dir;
}

/** How long a seed nobody wrote again is kept: a disk's first boot needs it for seconds. */
const SEED_KEEP_MS = 24 * 60 * 60 * 1000;
const SEED_NAME = /^[0-9a-f]{32}$/;

/**
 * Removes the seeds of other keys not written for {@link SEED_KEEP_MS} (an older agent, a
 * placement no longer used), so they do not pile up with upgrades. Each write renames its files
 * into the seed's directory, which keeps the directory's mtime that of its last write. Best effort.
 */
async function pruneSeeds(parentDir: string, keep: string): Promise<void> {
  const names = await fsp.readdir(parentDir).catch(() => [] as string[]);
  const before = Date.now() - SEED_KEEP_MS;
  for (const name of names) {
    if (name === keep || !SEED_NAME.test(name)) continue;
    const dir = path.join(parentDir, name);
    const stat = await fsp.lstat(dir).catch(() => undefined);
    if (stat?.isDirectory() && stat.mtimeMs < before)
      await fsp.rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }
}
