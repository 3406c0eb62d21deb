// Attaching to the guest agent: its TCP door, or the exec bridge that starts it if needed (the
// hello exchange that follows either is in hello.ts).
import { createHash } from "node:crypto";
import path from "node:path";
import { Readable, type Duplex } from "node:stream";
import { shellQuote } from "@pi-sandbox/config";
import type { GuestExecution, GuestExitStatus, GuestVm } from "@pi-sandbox/vm";
import { readAgentArchive } from "./agent-script.js";
import { AgentChannel } from "./channel.js";
import { SupervisorError, isSupervisorError, messageOf } from "./errors.js";
import type { SupervisorLogger } from "./logger.js";
import { exchangeHello } from "./hello.js";
import { agentDoorOf } from "./replies.js";
import type { AgentDoor, AgentHello, GuestIdentity } from "./types.js";

/**
 * Exit status of the launch script when the guest has no python3 (127, as the shell's own) or its
 * agent file is missing or is not this host's (97): the host then installs the agent and launches
 * again. A guest that already holds this host's agent (every start after the first, and every
 * warm start) is attached in one exec instead of two.
 */
const NEEDS_INSTALL_EXITS = new Set([97, 127]);

/** How long a running agent's door gets to connect and say hello before the exec bridge is used. */
const DOOR_TIMEOUT_MS = 5_000;

/**
 * How the agent's archive is run: its path is the first argument, the agent's own follow. Not as a
 * script (`python3 agent.pyz`), which imports runpy and importlib.util first: about 70 ms of each
 * start in a TCG guest, paid by every bridge and by the daemon. The agent's bridge.py holds the
 * same line (`LOADER`) to start its daemon; a unit test keeps the two equal.
 */
export const AGENT_LOADER =
  "import sys; sys.path.insert(0, sys.argv.pop(1)); from pi_sandbox_agent.start import entry; entry()";

/**
 * A shell test that `file` (a shell word) is the agent archive of `sha256` (a shell word that
 * expands to the hash): the check of each script that runs or reads after the installed agent.
 */
function holdsArchive(file: string, sha256: string): string {
  return `{ [ -f ${file} ] && [ "$(sha256sum < ${file})" = "${sha256}  -" ]; }`;
}

// Checks python, then (unless the expected hash is "-") that the installed agent is this host's
// (quietly: a fresh disk has none), then replaces the shell with the bridge. $0 python, $1 agent
// path, $2 sha256 or "-", $3 the loader. The agent needs only the standard library: -S skips the
// site module, which measured about 150 ms of Python's 350 ms start in a TCG guest, paid by every
// attach. -I keeps the working directory and PYTHON* variables out of the root agent's imports.
const LAUNCH_SCRIPT = [
  'command -v "$0" >/dev/null 2>&1 || exit 127',
  `{ [ "$2" = - ] || ${holdsArchive('"$1"', "$2")}; } || exit 97`,
  "p=$0 a=$1 l=$3",
  "shift 3",
  'exec "$p" -I -S -u -c "$l" "$a" "$@"',
].join("\n");

/**
 * The exec that launches the agent: the launch script, then the agent's arguments. `sha256` is the
 * archive's expected hash, or "-" right after an install.
 */
export function launchCommand(launch: Pick<AgentLaunch, "python" | "agentPath" | "args">, sha256: string): string[] {
  return ["/bin/sh", "-c", LAUNCH_SCRIPT, launch.python, launch.agentPath, sha256, AGENT_LOADER, ...launch.args];
}

/** What decides which agent runs in the guest: where it is, what runs it, its (bridge) arguments. */
export type AgentPlacement = Pick<AgentLaunch, "python" | "agentPath" | "args">;

/**
 * The key under which the guest's init may start the agent daemon at boot (the agent's boot.py):
 * a hash of the archive and of how it is run, so a host that wants another agent, or the same one
 * with other arguments, never gets a daemon it did not ask for. 32 hex digits.
 */
export function bootKeyOf(sha256: string, placement: AgentPlacement): string {
  const what = JSON.stringify([sha256, placement.python, placement.agentPath, ...placement.args]);
  return createHash("sha256").update(what).digest("hex").slice(0, 32);
}

/** The archive's name in a first-boot seed (see {@link agentSeedScript}). */
export const SEED_ARCHIVE = "sandbox_agent.pyz";
/** The seed's script, which the image's init runs as `sh <seed dir>/first-boot KEY`. */
export const SEED_SCRIPT = "first-boot";

/**
 * The script that starts the agent daemon at a disk's first boot, from a read-only seed directory
 * the host shares with the guest (the archive as {@link SEED_ARCHIVE} beside it). A fresh disk has
 * no agent, so without it the daemon starts only after the guest is ready: an install and two
 * Python starts, about 3 s under TCG. Only for `key` (as the agent's own boot script, boot.py):
 * it takes the start lock, installs the archive unless the disk holds this one already, and runs
 * the daemon as a bridge with these arguments would, plus `--boot` (the daemon drops the lock once
 * it listens, and later boots use the script the daemon leaves on the disk).
 */
export function agentSeedScript(placement: AgentPlacement & { stateDir: string }, sha256: string, key: string): string {
  const q = shellQuote;
  const base = path.posix.resolve(placement.stateDir);
  const agent = q(placement.agentPath);
  const next = q(`${placement.agentPath}.seed`);
  const daemonArgs = [...placement.args.filter((arg) => arg !== "--attach"), "--boot-key", key, "--daemon", "--boot"];
  return [
    "# Written by the pi-sandbox host: starts its guest agent at a disk's first boot (the image's",
    "# /init runs it with the key from the kernel command line when the disk has no agent yet).",
    `[ "$1" = ${q(key)} ] || exit 0`,
    `command -v ${q(placement.python)} >/dev/null 2>&1 || exit 0`,
    `exec 9>>${q(`${base}.lock`)} || exit 0`,
    "flock 9 || exit 0",
    `if ! ${holdsArchive(agent, sha256)}; then`,
    `  mkdir -p ${q(path.posix.dirname(placement.agentPath))} && cp "\${0%/*}/${SEED_ARCHIVE}" ${next} && mv -f ${next} ${agent} || exit 0`,
    "fi",
    [
      "exec",
      q(placement.python),
      "-I -S -u -c",
      q(AGENT_LOADER),
      agent,
      ...daemonArgs.map(q),
      `</dev/null >${q(`${base}.log`)} 2>&1`,
    ].join(" "),
    "",
  ].join("\n");
}

/** The sha256 of the agent archive this host installs, with the archive. */
export async function agentArchiveHash(): Promise<{ archive: Buffer; sha256: string }> {
  const archive = await readAgentArchive();
  return { archive, sha256: createHash("sha256").update(archive).digest("hex") };
}

/** What {@link attachAgent} opened: the channel, its stop switch and the agent's hello. */
export interface AttachedAgent {
  channel: AgentChannel;
  stopChannel: AbortController;
  hello: AgentHello;
  /** Whether the agent wrote the launch's `identity` (its hello's acceptance said so). */
  identityApplied: boolean;
  /** How: through the running agent's TCP door, or an exec bridge. */
  via?: "door";
}

/** Where and how the agent runs in the guest. */
export interface AgentLaunch {
  agentPath: string;
  python: string;
  /** The bridge's arguments after the agent path. */
  args: readonly string[];
  /** The agent's state dir (its socket, lock and door file sit beside it). */
  stateDir: string;
  startTimeoutMs: number;
  logger: SupervisorLogger;
  label: string;
  signal: AbortSignal | undefined;
  /** A running agent's TCP door from an earlier hello: tried first, the exec bridge on failure. */
  door?: AgentDoor | undefined;
  /** A new guest's identity, sent with every hello of this attach (writing it twice is harmless). */
  identity?: GuestIdentity | undefined;
}

/**
 * Opens the agent channel, then the hello exchange, the first way that works:
 * - the TCP door the caller has from an earlier hello of this agent (a warm start);
 * - the door a daemon of this host's key left in the guest once it listened (started at boot by
 *   the image's init, or by an earlier bridge of this boot), found by one shell exec;
 * - an exec bridge, which starts the daemon when none runs, after installing the agent when the
 *   guest lacks this host's copy.
 */
export async function attachAgent(vm: GuestVm, agent: AgentLaunch): Promise<AttachedAgent> {
  const recorded = agent.door && (await tryDoor(vm, agent, agent.door));
  if (recorded) return recorded;
  const { archive, sha256 } = await agentArchiveHash();
  // The daemon leaves its boot script and its door under this key (the VM's kernel line may carry the same).
  const key = bootKeyOf(sha256, agent);
  const launch = { ...agent, args: [...agent.args, "--boot-key", key] };
  const door = await findDaemonDoor(vm, launch, key, sha256);
  const found = door && (await tryDoor(vm, launch, door));
  if (found) return found;
  let bridged: AttachedAgent;
  try {
    bridged = await openChannel(vm, launch, sha256);
  } catch (error) {
    const exitCode = isSupervisorError(error, "AGENT_START_FAILED") ? error.details.exitCode : undefined;
    if (typeof exitCode !== "number" || !NEEDS_INSTALL_EXITS.has(exitCode)) throw error;
    await installAgent(vm, archive, launch.agentPath, launch.python, launch.signal);
    bridged = await openChannel(vm, launch, "-");
  }
  return leaveBridge(vm, launch, bridged);
}

/** {@link openDoor}, undefined (logged) when the door does not let in. */
async function tryDoor(vm: GuestVm, agent: AgentLaunch, door: AgentDoor): Promise<AttachedAgent | undefined> {
  try {
    return await openDoor(vm, agent, door);
  } catch (error) {
    if (agent.signal?.aborted) throw agent.signal.reason;
    agent.logger.info(
      `${agent.label} the agent's door did not let in (${messageOf(error)}); attaching through an exec`,
    );
    return undefined;
  }
}

// Waits (up to $3 s) for a daemon being started to listen (its starter holds the start lock until
// then), and prints its door, `PORT TOKEN`, when a daemon listens on the socket now, its door file
// has this key ($2), and the agent file ($4) is still this host's (sha256 $5; one that changed on
// the disk is put back by the bridge's launch, so the next boot runs this host's agent). $1 is
// the state dir's base path. Silent otherwise: the host then bridges.
const DOOR_QUERY_SCRIPT = [
  'exec 9>>"$1.lock" && flock -w "$3" 9 || exit 0',
  "awk -v p=\"$1.sock\" '$8 == p { found = 1 } END { exit !found }' /proc/net/unix || exit 0",
  `${holdsArchive('"$4"', "$5")} || exit 0`,
  'read -r key port token < "$1.door" || exit 0',
  '[ "$key" = "$2" ] && echo "$port $token"',
].join("\n");
const DOOR_LINE = /^(\d{1,5}) ([0-9a-f]{32})\n$/;
const DOOR_QUERY_MAX_BYTES = 128;

/**
 * The door of the guest's agent daemon of `key`, from the file it leaves once it listens (see the
 * agent's boot.py): one exec of the shell and a few small tools, where a bridge is also a Python
 * start, which a guest still busy with its first boot pays dearly for under TCG. Undefined when no
 * such daemon runs. What the guest prints is checked; it gets no more trust than a hello.
 */
async function findDaemonDoor(
  vm: GuestVm,
  launch: AgentLaunch,
  key: string,
  sha256: string,
): Promise<AgentDoor | undefined> {
  const base = path.posix.resolve(launch.stateDir);
  const waitS = String(Math.max(1, Math.ceil(launch.startTimeoutMs / 1000)));
  const stop = new AbortController();
  const onAbort = (): void => stop.abort(launch.signal?.reason);
  launch.signal?.addEventListener("abort", onAbort, { once: true });
  // The guest's flock bounds the wait too, but the guest is not trusted to: the bridge takes over.
  const timer = setTimeout(() => stop.abort(new Error("the door query did not answer")), launch.startTimeoutMs);
  try {
    const command = ["/bin/sh", "-c", DOOR_QUERY_SCRIPT, "sh", base, key, waitS, launch.agentPath, sha256];
    const execution = vm.exec(command, { signal: stop.signal });
    execution.stderr.resume();
    let text = "";
    execution.stdout.on("data", (chunk: Buffer) => {
      text += chunk.toString("latin1");
      // A guest that writes without end is not a door: stop it.
      if (text.length > DOOR_QUERY_MAX_BYTES) stop.abort(new Error("the door query wrote too much"));
    });
    const status = await execution.result.catch((error: unknown) => {
      if (launch.signal?.aborted) throw launch.signal.reason;
      if (stop.signal.aborted) return undefined;
      throw error;
    });
    const match = status?.exitCode === 0 ? DOOR_LINE.exec(text) : null;
    return match ? agentDoorOf({ port: Number(match[1]), token: match[2] }) : undefined;
  } finally {
    clearTimeout(timer);
    launch.signal?.removeEventListener("abort", onAbort);
  }
}

/**
 * Moves a session the exec bridge opened to the agent's TCP door, when it has one. The bridge is
 * a Python process in the guest (about 9 MiB) and an exec held open for as long as the session
 * lasts. The door's session replaces the bridge's in the agent and the bridge exits; the first
 * hello is kept, since it is the one that tells whether this session started the agent. A door
 * that does not let in leaves the bridge in use; one that let in and then failed has ended it, so
 * a new bridge opens.
 */
async function leaveBridge(vm: GuestVm, launch: AgentLaunch, bridged: AttachedAgent): Promise<AttachedAgent> {
  const door = bridged.hello.door;
  if (!door) return bridged;
  try {
    const moved = await openDoor(vm, launch, door);
    // The bridge exits on its own once its stdin ends; nothing waits for that (about 0.2 s in TCG).
    void bridged.channel
      .detach(2_000)
      .then(() => bridged.stopChannel.abort(new Error("the session moved to the agent's door")));
    const identityApplied = moved.identityApplied || bridged.identityApplied;
    return { channel: moved.channel, stopChannel: moved.stopChannel, hello: bridged.hello, identityApplied };
  } catch (error) {
    if (launch.signal?.aborted) {
      await bridged.channel.detach(1_000);
      throw launch.signal.reason;
    }
    launch.logger.info(
      `${launch.label} the agent's door did not let in (${messageOf(error)}); keeping its exec bridge`,
    );
    if (!bridged.channel.closed) return bridged;
    return openChannel(vm, launch, "-");
  }
}

async function openChannel(vm: GuestVm, launch: AgentLaunch, sha256: string): Promise<AttachedAgent> {
  const stopChannel = new AbortController();
  const execution = vm.exec(launchCommand(launch, sha256), {
    stdin: true,
    signal: stopChannel.signal,
  });
  // Rejections surface through the channel; keep this one from going unhandled after an abort.
  execution.result.catch(() => undefined);
  const channel = new AgentChannel(execution, launch.logger, launch.label, (reason) => stopChannel.abort(reason));
  try {
    const { hello, identityApplied } = await exchangeHello(
      channel,
      launch.startTimeoutMs,
      launch.signal,
      launch.identity,
    );
    return { channel, stopChannel, hello, identityApplied };
  } catch (error) {
    stopChannel.abort(new Error("supervisor start failed"));
    await channel.shutdown(2_000);
    throw error;
  }
}

/**
 * Attaches through a running agent's loopback TCP door (its hello's `attach`): no exec, shell or
 * Python start in the guest. A failure detaches (the agent behind it keeps running) and throws,
 * and the caller uses the exec bridge instead.
 */
async function openDoor(vm: GuestVm, launch: AgentLaunch, door: AgentDoor): Promise<AttachedAgent> {
  const stopChannel = new AbortController();
  const socket = await vm.connectTcp(door.port, {
    timeoutMs: DOOR_TIMEOUT_MS,
    ...(launch.signal ? { signal: launch.signal } : {}),
  });
  socket.write(`${door.token}\n`);
  const channel = new AgentChannel(socketExecution(socket, stopChannel.signal), launch.logger, launch.label, (reason) =>
    stopChannel.abort(reason),
  );
  try {
    const { hello, identityApplied } = await exchangeHello(channel, DOOR_TIMEOUT_MS, launch.signal, launch.identity);
    return { channel, stopChannel, hello, identityApplied, via: "door" };
  } catch (error) {
    await channel.detach(1_000);
    stopChannel.abort(new Error("the agent's door did not let in"));
    throw error;
  }
}

/** A TCP stream to the agent as the channel's "exec": it ends when the stream closes. */
function socketExecution(socket: Duplex, signal: AbortSignal): GuestExecution {
  const result = new Promise<GuestExitStatus>((resolve) => socket.once("close", () => resolve({ exitCode: 0 })));
  socket.on("error", () => undefined); // "close" follows, and the channel reports the end
  signal.addEventListener("abort", () => socket.destroy(), { once: true });
  return { stdin: socket, stdout: socket, stderr: Readable.from([]), result };
}

/** Checks for python3 and writes the agent zipapp into the guest, in one exec fed on stdin. */
async function installAgent(
  vm: GuestVm,
  archive: Buffer,
  agentPath: string,
  python: string,
  signal: AbortSignal | undefined,
) {
  const dir = agentPath.replace(/\/[^/]*$/, "") || "/";
  // One exec: check python, then write the archive atomically. File ops are avoided on purpose:
  // Gondolin serialises them behind execs, and this keeps install and launch on one path.
  const script = [
    'command -v "$0" >/dev/null 2>&1 || { echo "python3 ($0) not found in the guest" >&2; exit 127; }',
    'mkdir -p "$1"',
    'cat > "$2.tmp"',
    'mv -f "$2.tmp" "$2"',
  ].join(" && ");
  const execution = vm.exec(["/bin/sh", "-c", script, python, dir, agentPath], { stdin: archive, signal });
  const stderr: Buffer[] = [];
  let stderrBytes = 0;
  execution.stdout.resume();
  execution.stderr.on("data", (chunk: Buffer) => {
    // Only the start matters; a guest that writes without end must not fill the host's memory.
    if (stderrBytes < 4096) stderr.push(chunk.subarray(0, 4096 - stderrBytes));
    stderrBytes += chunk.length;
  });
  const status = await execution.result;
  const text = Buffer.concat(stderr).toString("utf8").trim();
  if (status.exitCode === 127) {
    throw new SupervisorError(
      "GUEST_PYTHON_MISSING",
      `the guest image has no ${python}; commands and services need it`,
      { hint: "use an image that includes python3", details: { tool: python, stderr: text } },
    );
  }
  if (status.exitCode !== 0) {
    throw new SupervisorError(
      "AGENT_START_FAILED",
      `could not install the guest agent at ${agentPath} (exit ${status.exitCode}): ${text || "no output"}`,
      { details: { exitCode: status.exitCode, stderr: text } },
    );
  }
}
