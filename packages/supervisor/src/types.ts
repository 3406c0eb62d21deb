// The results the supervisor client returns: hello, exec, file reads and writes, service status.
import type { HealthCheck } from "@pi-sandbox/config";
import type { SupervisorErrorCode } from "./errors.js";

/** Facts the agent reports when its channel opens. */
export interface AgentHello {
  /** Wire protocol version. */
  protocol: number;
  /** Agent version. */
  version: string;
  /** Guest PID of the agent. */
  pid: number;
  /** Guest python3 version. */
  python: string;
  /** Guest state directory. */
  stateDir: string;
  /** Guest workspace directory. */
  workspace: string;
  /** Login shell used for commands and services. */
  shell: string;
  /** How setup leftovers are found: `cgroup+environ` or `environ`. */
  cleanup: string;
  /** Whether execs start in a login bash launched ahead of time (see the README's "Exec start-up"). */
  warmShell: boolean;
  /**
   * Host sessions this agent served before this one: above 0 when the client attached to an agent
   * that was already running (see the README's "A channel the agent outlives").
   */
  sessions: number;
  /**
   * Whether the image's init started this agent while the guest booted (see the README's "Started
   * at boot"); false when a bridge started it, and from agents older than that.
   */
  boot: boolean;
  /**
   * The agent's loopback TCP door: a later client of the same running agent (a warm start, a lost
   * channel) passes it as `door` to attach without an exec. Absent from agents older than it.
   */
  door?: AgentDoor;
}

/**
 * A new guest's own identity, which the agent writes when the host's hello carries it (see
 * `StartSupervisorOptions.identity`).
 */
export interface GuestIdentity {
  /** The guest's new /etc/machine-id: 32 lowercase hex digits. */
  machineId: string;
  /** The guest's hostname (a valid hostname of at most 64 characters, else the agent applies nothing). */
  hostname: string;
}

/** Where a running agent takes host sessions without an exec bridge, and the token it wants first. */
export interface AgentDoor {
  /** Guest loopback TCP port. */
  port: number;
  /** 32 hex digits, sent as the connection's first line. */
  token: string;
}

/**
 * What the guest's commands are doing, for a host that suspends an idle guest (see
 * `SupervisorClient.activity`).
 */
export interface AgentActivity {
  /** Exec handles and setup/resume runs still running. */
  runningJobs: number;
  /** Ms since a job last started or ended; absent before the first job of this agent. */
  jobsIdleMs?: number;
}

/** What a command run or status call reports. */
export interface ExecResult {
  /** Opaque handle for exec-status and exec-kill. */
  handle: string;
  /** True while the command still runs; the wait ended, not the command. */
  running: boolean;
  /** Exit code once finished; 128+n when killed by signal n. */
  exitCode?: number;
  /** Signal name when the command was killed by one. */
  signal?: string;
  /**
   * Output not returned by an earlier call, at most 64 KiB: stdout and stderr interleaved, or
   * stdout only when the exec asked for `separateStderr`.
   */
  output: string;
  /** Bytes of output left out of `output` (an explicit marker shows where); 0 when complete. */
  truncatedBytes: number;
  /** With `separateStderr`: stderr not returned by an earlier call, at most 64 KiB. */
  stderr?: string;
  /** With `separateStderr`: bytes left out of `stderr`. */
  stderrTruncatedBytes?: number;
  /** Run time in ms, once finished. */
  durationMs?: number;
}

/** What exec-kill reports. */
export interface ExecKillResult {
  /** The handle. */
  handle: string;
  /** True when the command was still running and was terminated by this call. */
  killed: boolean;
  /** Whether the command still runs (false after a successful kill). */
  running: boolean;
  /** Final exit code. */
  exitCode?: number;
  /** Signal that ended it. */
  signal?: string;
}

/** A capped text read of a guest file. */
export interface TextRead {
  /** File text (UTF-8, invalid bytes replaced); at most 64 KiB including the truncation marker. */
  content: string;
  /** True when the file is larger than what `content` holds. */
  truncated: boolean;
  /** Size of the file in bytes. */
  sizeBytes: number;
}

/** What a completed write reports. */
export interface WriteResult {
  /** Absolute guest path written. */
  path: string;
  /** Bytes written. */
  sizeBytes: number;
  /** sha256 of the content; the guest checked it (through the transfer disk: its CRC-32) before it replaced the file. */
  sha256: string;
}

/** Life-cycle state of a supervised service. */
export type ServiceState =
  /** Its process is alive (see `readiness` for whether it answers). */
  | "running"
  /** It exited and will be started again after the 1 s delay. */
  | "restarting"
  /** A stop is in progress. */
  | "stopping"
  /** Stopped explicitly; stays stopped until ensure, restart or a reopen. */
  | "stopped"
  /** Declared in the guest YAML but not started in this boot. */
  | "not-started";

/** How a service process last ended. */
export interface ServiceExit {
  /** Exit code; 128+n for signal n; 127 when it could not be started at all. */
  exitCode: number;
  /** Signal name, when killed by one. */
  signal?: string;
  /** ISO time of the exit. */
  at: string;
  /** Why it could not start, when it could not. */
  error?: string;
}

/** One service as the supervisor sees it. */
export interface ServiceStatus {
  /** Service name. */
  name: string;
  /** Life-cycle state. */
  state: ServiceState;
  /** Guest PID of the service's shell, while running. */
  pid: number | null;
  /** Guest port in `PORT`; kept across restarts and reopen. */
  port: number | null;
  /** Automatic restarts since it was last started by ensure/restart. */
  restarts: number;
  /** How its process last ended, if it ever did. */
  lastExit: ServiceExit | null;
  /** Readiness of the current process. */
  readiness: {
    /** `pending` until the check passes, `ready`, or `failed` after its `timeoutMs`. */
    state: "pending" | "ready" | "failed";
    /** Last probe failure, if any. */
    error: string | null;
    /** ISO time the check passed. */
    readyAt: string | null;
  };
  /** ISO time the current process started. */
  startedAt: string | null;
  /** Command it runs. */
  command: string;
  /** Absolute guest working directory. */
  cwd: string;
  /** Readiness check. */
  health: HealthCheck;
  /** True for an ad-hoc service started with startService. */
  adhoc: boolean;
  /** Guest path of its current log file (rotated to `<logPath>.1`). */
  logPath: string | null;
}

/** A service that did not come up as asked; the instance keeps running. */
export interface ServiceFailure {
  /** Service name. */
  service: string;
  /** Why: SERVICE_NOT_READY, SERVICE_REFERENCE_UNRESOLVED, ... */
  code: SupervisorErrorCode;
  /** What happened and where to look next. */
  message: string;
  /** What to do about it, when the failure's own error said (an unresolved reference: start that service). */
  hint?: string;
  /** Guest path of the service log, when there is one. */
  logPath?: string;
}

/** Result of ensure/restart/stop/status. */
export interface ServicesResult {
  /** Every known service: declared ones in start order, then ad-hoc ones. */
  services: ServiceStatus[];
  /** Services this call started (ensure) or restarted (restart). */
  started: string[];
  /** Live services ensure left alone. */
  kept: string[];
  /** Services stopped by this call. */
  stopped: string[];
  /** Services that failed to come up; empty when all are ready. */
  failures: ServiceFailure[];
}

/** One step of a setup or resume run. */
export interface RunStep {
  /** The command, or the hook path relative to the workspace. */
  command: string;
  /** Exit code; 127 when it could not be started. */
  exitCode: number;
  /** Signal name when killed by one. */
  signal?: string;
  /** Run time in ms. */
  durationMs?: number;
  /** Why it could not start. */
  error?: string;
}

/** Result of the setup runner. */
export interface SetupResult {
  /** True when every step exited 0 within the deadline. */
  ok: boolean;
  /** Handle of the run (its output can no longer be followed once this returns). */
  handle: string;
  /** Exit code of the last step run; 124 when the deadline passed. */
  exitCode: number;
  /** Signal of the last step, when killed by one. */
  signal?: string;
  /** True when the 20-minute deadline ended the run. */
  timedOut: boolean;
  /** Steps in the order they ran; later steps are absent after a failure. */
  steps: RunStep[];
  /** The last 64 KiB of the run's output, with a marker when earlier output was left out. */
  output: string;
  /** Bytes of output left out. */
  truncatedBytes: number;
  /** Leftover processes stopped after the run. */
  cleanup: { method: string; stopped: number };
  /** Guest path of the full output, kept until the next reopen. */
  logPath: string;
  /** Run time in ms. */
  durationMs: number;
}

/** Result of the resume runner: finished, or still running behind a handle. */
export interface ResumeResult extends ExecResult {
  /** Steps that finished so far. */
  steps: RunStep[];
}

/** Tail of a service log. */
export interface LogTail {
  /** Service name. */
  service: string;
  /** The last lines, oldest first; at most 64 KiB. */
  text: string;
  /** Number of lines in `text`. */
  lines: number;
  /** Bytes left out to stay under 64 KiB. */
  truncatedBytes: number;
  /** Guest path of the current log file. */
  logPath: string;
}

/** An ad-hoc service started with {@link SupervisorClient.startService}. */
export interface AdHocServiceSpec {
  /** Service name (`^[a-z0-9][a-z0-9-]{0,31}$`); may not be declared in the guest YAML. */
  name: string;
  /** Foreground login-shell command. */
  command: string;
  /** Workspace-relative working directory; default the workspace. */
  cwd?: string;
  /** Fixed guest port; omitted → a sticky free port. */
  port?: number;
  /** Extra environment; `PORT` and `PUBLIC_URL` are set by the supervisor. */
  env?: Record<string, string>;
  /** Readiness check; default TCP. */
  health?: HealthCheck;
  /** Host preview origin, given to the service as `PUBLIC_URL`. */
  publicUrl?: string;
}
