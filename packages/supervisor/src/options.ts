// Options of the supervisor client and its calls (timeouts, waits, exec, services, setup).
import type { SandboxConfig } from "@pi-sandbox/config";
import type { GuestVm } from "@pi-sandbox/vm";
import type { AgentDoor, GuestIdentity } from "./types.js";
import type { SupervisorLogger } from "./logger.js";
import type { PreviewOrigins } from "./service-specs.js";

/** Options of `SupervisorClient.start`. */
/** Where the agent goes in the guest and how it runs (what its boot key covers). */
export interface AgentPlacementOptions {
  /** Absolute guest workspace; default `/workspace`. */
  workspace?: string;
  /** Guest state directory of the agent; default `DEFAULT_AGENT_STATE_DIR`. */
  stateDir?: string;
  /** Guest path to install the agent to; default `DEFAULT_AGENT_PATH`. */
  agentPath?: string;
  /** Guest python interpreter; default `python3`. */
  python?: string;
  /** Extra agent flags, e.g. `["--cgroup-root", "none"]` or `["--port-range", "30000-30999"]`. */
  agentArgs?: readonly string[];
}

export interface StartSupervisorOptions extends AgentPlacementOptions {
  /** The booted guest. The client uses `exec`, and `connectTcp` for a `door`. */
  vm: GuestVm;
  /**
   * The running agent's TCP door from an earlier client's `hello.door` (a warm start, a lost
   * channel): tried first, without an exec; on any failure the start goes on through the exec
   * bridge as without it. Give it only for the same guest boot (the door of an earlier boot is gone,
   * and another guest program may listen on its port).
   */
  door?: AgentDoor;
  /**
   * A new guest's own machine-id and hostname: sent with the hello, and written by the agent (the
   * old ssh host keys removed) before it serves anything. `SupervisorClient.identityApplied` says
   * whether it was; an agent older than this, or one that could not, leaves it to the caller.
   */
  identity?: GuestIdentity;
  /** How long to wait for the agent's hello, in ms; default 60000 (TCG guests are slow). */
  startTimeoutMs?: number;
  /** Receives diagnostics; default silent. */
  logger?: SupervisorLogger;
  /** Cancels the start; the promise rejects with `signal.reason` and nothing is left running. */
  signal?: AbortSignal;
}

/** Common options of every call. */
export interface CallOptions {
  /** Cancels the call; rejects with `signal.reason`. Work already started in the guest may go on. */
  signal?: AbortSignal;
}

/** Options of exec and exec-status. */
export interface WaitOptions extends CallOptions {
  /** How long to wait for the command to finish, 0–60000 ms; default 10000. Ends only the wait. */
  timeoutMs?: number;
}

/** Options of `SupervisorClient.exec`. */
export interface ExecOptions extends WaitOptions {
  /** Working directory, relative to the workspace (an absolute path is used as is). */
  cwd?: string;
  /** Extra environment for the command. */
  env?: Record<string, string>;
  /**
   * Keep stderr apart: results carry it as `stderr` (exec-status of the handle too) and `output`
   * is stdout only.
   */
  separateStderr?: boolean;
}

/** Options of `SupervisorClient.ensureServices` and `SupervisorClient.restartServices`. */
export interface ServiceOpOptions extends CallOptions {
  /** Host preview origin per service (`http://127.0.0.1:<port>`): `PUBLIC_URL` and `${services.X.publicURL}`. */
  previewOrigins?: PreviewOrigins;
  /**
   * The guest `.sandbox.yaml` as the caller already holds it, parsed and validated (the host's
   * config right after writing it there, or one the caller just read with `readGuestConfig`):
   * the call then does not read and parse the guest file again. Default: read it.
   */
  config?: SandboxConfig;
}

/** Options of `SupervisorClient.runSetup`. */
export interface SetupOptions extends CallOptions {
  /** Setup commands; default the guest YAML's `setup` (none when the file is missing). */
  commands?: readonly string[];
  /** One deadline for all commands and the hook, in ms; default and maximum 20 minutes. */
  deadlineMs?: number;
}

/** Options of `SupervisorClient.runResume`. */
export interface ResumeOptions extends CallOptions {
  /** Resume commands; default the guest YAML's `resume` (none when the file is missing). */
  commands?: readonly string[];
  /** How long to wait before continuing in the background, in ms; default 10000. */
  waitMs?: number;
}

/** How much longer than a request's own wait the host gives the agent to answer, in ms. */
export const REPLY_MARGIN_MS = 60_000;
