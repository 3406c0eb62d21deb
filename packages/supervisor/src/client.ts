// The supervisor client: the host's API to the guest agent (exec, services, setup/resume, files,
// logs) over one agent channel.
import { LIMITS, type SandboxConfig } from "@pi-sandbox/config";
import { checkAbsolute, checkWait, cutUtf8, isSetupHandle, toExecResult } from "./call-args.js";
import { AgentChannel, type AgentEvent } from "./channel.js";
import { SupervisorError } from "./errors.js";
import { readThroughAgent, writeThroughAgent } from "./file-transfer.js";
import { guestConfigPath, readGuestConfigOrNothing, readGuestConfigThroughAgent } from "./guest-config.js";
import { GuestFiles } from "./guest-files.js";
import { attachAgent } from "./launch.js";
import { followLogThroughAgent, followSetupThroughAgent, type LogFollowed, type SetupFollowed } from "./log-follow.js";
import { silentLogger, type SupervisorLogger } from "./logger.js";
import {
  type CallOptions,
  type ExecOptions,
  type ResumeOptions,
  type ServiceOpOptions,
  type SetupOptions,
  type StartSupervisorOptions,
  type WaitOptions,
  REPLY_MARGIN_MS,
} from "./options.js";
import { MAX_READ_BYTES, MAX_WRITE_BYTES } from "./protocol.js";
import { parseActivity, parseExec, parseHello, parseKill } from "./replies.js";
import { runResumeThroughAgent, runSetupThroughAgent } from "./runs.js";
import { placementOf } from "./placement.js";
import { ServiceControl } from "./service-control.js";
import { STREAM_CONNECT_TIMEOUT_MS, type GuestConnect } from "./transfer-stream.js";
import { diskLaneOf, type DiskLane } from "./transfer-disk.js";
import type {
  AdHocServiceSpec,
  AgentActivity,
  AgentHello,
  ExecKillResult,
  ExecResult,
  LogTail,
  ResumeResult,
  ServiceStatus,
  ServicesResult,
  SetupResult,
  TextRead,
  WriteResult,
} from "./types.js";

export { GUEST_CONFIG_NAME } from "./guest-config.js";
export { DEFAULT_AGENT_PATH, DEFAULT_AGENT_STATE_DIR } from "./placement.js";

/**
 * Host side of the guest agent: one long-lived exec channel per boot, carrying commands, file
 * transfers and service control. Service restarts and readiness checks run inside the guest.
 */
export class SupervisorClient implements AsyncDisposable {
  private closing: Promise<void> | undefined;
  private readonly services: ServiceControl;

  private constructor(
    private readonly channel: AgentChannel,
    private readonly stopChannel: AbortController,
    /** What the agent reported when the channel opened. */
    readonly hello: AgentHello,
    /** Whether the agent wrote the `identity` of the start's options (false without one). */
    readonly identityApplied: boolean,
    /** Absolute guest workspace. */
    readonly workspace: string,
    private readonly logger: SupervisorLogger,
    /** Ways for the bytes of large transfers: a stream to a guest loopback port, the transfer disk. */
    private readonly ways?: { connect: GuestConnect; disk: DiskLane | undefined },
  ) {
    this.services = new ServiceControl(channel, {
      configPath: this.configPath,
      read: (options) => this.readGuestConfig(options),
      tryRead: (signal) => this.tryGuestConfig(signal),
    });
  }

  /**
   * Attaches to the guest's agent daemon and exchanges hellos (the host's carries the limits):
   * through its TCP door when a running daemon of this host's agent has one (a warm start's
   * recorded door, or the door file a daemon started at boot leaves), else over an exec bridge that
   * starts the daemon, after installing the agent when the guest lacks this host's copy (see the
   * README's "A channel the agent outlives"). A new client of a guest whose agent runs already (a
   * lost channel, a resumed guest) gets that agent, its services and exec handles.
   */
  static async start(options: StartSupervisorOptions): Promise<SupervisorClient> {
    const { vm, signal } = options;
    signal?.throwIfAborted();
    const logger = options.logger ?? silentLogger;
    const label = `[supervisor ${vm.name}]`;
    const placement = placementOf(options);
    const workspace = placement.workspace;

    const { channel, stopChannel, hello, identityApplied, via } = await attachAgent(vm, {
      ...placement,
      door: options.door,
      identity: options.identity,
      startTimeoutMs: options.startTimeoutMs ?? 60_000,
      logger,
      label,
      signal,
    });
    try {
      const connect: GuestConnect = (port, signal) =>
        vm.connectTcp(port, { timeoutMs: STREAM_CONNECT_TIMEOUT_MS, ...(signal ? { signal } : {}) });
      const ways = { connect, disk: diskLaneOf(vm.transferDisk) };
      const client = new SupervisorClient(channel, stopChannel, hello, identityApplied, workspace, logger, ways);
      const door = via === "door" ? "through its TCP door" : undefined;
      if (hello.sessions > 0) {
        await client.services.adoptRunning(signal);
        logger.info(
          `${label} attached to the running agent ${hello.version} (pid ${hello.pid})${door ? ` ${door}` : ""}`,
        );
      } else {
        const how = [hello.boot && "started at boot", door, `python ${hello.python}`, `cleanup by ${hello.cleanup}`];
        logger.info(`${label} agent ${hello.version} up (${how.filter(Boolean).join(", ")})`);
      }
      return client;
    } catch (error) {
      stopChannel.abort(new Error("supervisor start failed"));
      await channel.shutdown(2_000);
      throw error;
    }
  }

  /** True once the agent channel has closed. */
  get closed(): boolean {
    return this.channel.closed;
  }

  /**
   * Why the channel closed, once it has: AGENT_PROTOCOL when the agent broke the protocol (the
   * guest is broken or hostile), AGENT_CLOSED when it exited or the client was closed.
   */
  get closedReason(): SupervisorError | undefined {
    return this.channel.closedReason;
  }

  /** Calls `listener` once when the channel closes, with {@link closedReason}; returns the unsubscribe function. */
  onClosed(listener: (reason: SupervisorError) => void): () => void {
    return this.channel.onClosed(listener);
  }

  /** Subscribes to agent events (service start/exit/ready/not-ready); returns the unsubscribe function. */
  onEvent(listener: (event: AgentEvent) => void): () => void {
    return this.channel.onEvent(listener);
  }

  /** Round trip to the agent; resolves with its hello facts. */
  async ping(options: CallOptions = {}): Promise<AgentHello> {
    return this.channel.request("ping", {}, parseHello, { signal: options.signal, timeoutMs: REPLY_MARGIN_MS });
  }

  /**
   * How many exec handles and setup/resume runs are running, and how long since one last started
   * or ended (one round trip, a ping); undefined from an agent that does not tell.
   */
  async activity(options: CallOptions = {}): Promise<AgentActivity | undefined> {
    return this.channel.request("ping", {}, parseActivity, { signal: options.signal, timeoutMs: REPLY_MARGIN_MS });
  }

  // -- commands

  /**
   * Runs `command` in a guest login shell. Waits up to `timeoutMs`; a command still running then
   * returns `{running: true, handle}` and keeps running.
   */
  async exec(command: string, options: ExecOptions = {}): Promise<ExecResult> {
    if (typeof command !== "string" || command.trim() === "") {
      throw new SupervisorError("INVALID_ARGUMENT", "the command is empty", {
        hint: "pass a shell command",
        details: { key: "command" },
      });
    }
    const timeoutMs = checkWait(options.timeoutMs, "timeoutMs");
    const raw = await this.channel.request(
      "exec",
      {
        command,
        timeoutMs,
        ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
        ...(options.env === undefined ? {} : { env: options.env }),
        ...(options.separateStderr ? { separateStderr: true } : {}),
      },
      (result) => parseExec(result),
      { signal: options.signal, timeoutMs: timeoutMs + REPLY_MARGIN_MS },
    );
    return toExecResult(raw);
  }

  /** Waits up to `timeoutMs` for a command and returns only output not returned before. */
  async execStatus(handle: string, options: WaitOptions = {}): Promise<ExecResult> {
    const timeoutMs = checkWait(options.timeoutMs, "timeoutMs");
    const raw = await this.channel.request(
      "exec-status",
      { handle, timeoutMs },
      (result) => parseExec(result, { expectHandle: handle, keep: isSetupHandle(result) ? "tail" : "head-tail" }),
      { signal: options.signal, timeoutMs: timeoutMs + REPLY_MARGIN_MS },
    );
    return toExecResult(raw);
  }

  /** Terminates the command's whole process group (SIGTERM, then SIGKILL after 2 s). */
  async execKill(handle: string, options: CallOptions = {}): Promise<ExecKillResult> {
    const raw = await this.channel.request("exec-kill", { handle }, (result) => parseKill(result, handle), {
      signal: options.signal,
      timeoutMs: REPLY_MARGIN_MS,
    });
    return {
      handle: raw.handle,
      killed: raw.killed,
      running: raw.running,
      ...(raw.exitCode === undefined ? {} : { exitCode: raw.exitCode }),
      ...(raw.signal === undefined ? {} : { signal: raw.signal }),
    };
  }

  // -- files

  /** Reads a guest file exactly; fails with FILE_TOO_LARGE above `maxBytes` (default 16 MiB). */
  async readFile(path: string, options: CallOptions & { maxBytes?: number } = {}): Promise<Buffer> {
    checkAbsolute(path);
    const maxBytes = options.maxBytes ?? 16 * 1024 * 1024;
    if (!Number.isInteger(maxBytes) || maxBytes < 0 || maxBytes > MAX_READ_BYTES) {
      throw new SupervisorError("INVALID_ARGUMENT", `maxBytes must be an integer from 0 to ${MAX_READ_BYTES}`, {
        details: { key: "maxBytes", value: maxBytes },
      });
    }
    const read = await readThroughAgent(this.channel, path, maxBytes, true, options.signal);
    return read.data;
  }

  /** Reads a guest text file, capped at 64 KiB with the truncation marked in the text. */
  async readText(path: string, options: CallOptions = {}): Promise<TextRead> {
    checkAbsolute(path);
    const cap = LIMITS.outputMaxBytes;
    const read = await readThroughAgent(this.channel, path, cap, false, options.signal);
    if (!read.truncated) return { content: read.data.toString("utf8"), truncated: false, sizeBytes: read.size };
    const marker = `\n[... pi-sandbox: file is ${read.size} bytes; only the first part is shown ...]\n`;
    const kept = cutUtf8(read.data, cap - Buffer.byteLength(marker) - 16);
    return { content: kept.toString("utf8") + marker, truncated: true, sizeBytes: read.size };
  }

  /**
   * Writes a guest file atomically (temp file, fsync, rename) after the guest verified the
   * sha256. The parent directory must exist unless `createParents`. Capped at `maxBytes`
   * (default 1 MiB, the product's write limit).
   */
  async writeFile(
    path: string,
    content: string | Buffer,
    options: CallOptions & { maxBytes?: number; mode?: number; createParents?: boolean } = {},
  ): Promise<WriteResult> {
    checkAbsolute(path);
    const data = typeof content === "string" ? Buffer.from(content, "utf8") : content;
    const maxBytes = Math.min(options.maxBytes ?? LIMITS.writeMaxBytes, MAX_WRITE_BYTES);
    if (data.length > maxBytes) {
      throw new SupervisorError(
        "FILE_TOO_LARGE",
        `cannot write ${path}: ${data.length} bytes is more than the ${maxBytes} allowed`,
        { hint: "split the content or transfer an archive", details: { path, sizeBytes: data.length, maxBytes } },
      );
    }
    return writeThroughAgent(this.channel, path, data, options);
  }

  /** Streamed reads and writes up to 256 MiB, stat, directory trees and mkdir (for copies). */
  get files(): GuestFiles {
    return new GuestFiles(this.channel, this.ways?.connect, this.ways?.disk);
  }

  // -- guest config

  /** Guest path of the editable config copy. */
  get configPath(): string {
    return guestConfigPath(this.workspace);
  }

  /** Reads and validates `<workspace>/.sandbox.yaml` from the guest (guest-config.ts). */
  readGuestConfig(options: CallOptions = {}): Promise<SandboxConfig> {
    return readGuestConfigThroughAgent(this.channel, this.configPath, options.signal);
  }

  /** The guest config, or undefined when it is missing or invalid (for status and stop). */
  private tryGuestConfig(signal: AbortSignal | undefined): Promise<SandboxConfig | undefined> {
    return readGuestConfigOrNothing(() => this.readGuestConfig({ signal }), this.logger);
  }

  // -- services (service-control.ts)

  /**
   * Re-reads the guest YAML (or takes `options.config`, already read) and starts every service
   * that is not running, explicitly stopped ones included, in start order; never replaces a live
   * process. With names, only those (each must be declared: SERVICE_NOT_FOUND otherwise). Waits
   * for readiness; services that fail it are listed in `failures` and keep running.
   */
  ensureServices(names?: readonly string[], options: ServiceOpOptions = {}): Promise<ServicesResult> {
    return this.services.ensureServices(names, options);
  }

  /**
   * Stops and starts services again with command, cwd, env and health re-read from the guest
   * YAML (or `options.config`), keeping each one's port. Without names: every declared service
   * and every ad-hoc one.
   */
  restartServices(names?: readonly string[], options: ServiceOpOptions = {}): Promise<ServicesResult> {
    return this.services.restartServices(names, options);
  }

  /** Stops services (all without names); they stay stopped until ensure, restart or a reopen. */
  stopServices(names?: readonly string[], options: CallOptions = {}): Promise<ServicesResult> {
    return this.services.stopServices(names, options);
  }

  /** State, pid, port, restarts, last exit and readiness of each service (all without names). */
  serviceStatus(names?: readonly string[], options: CallOptions = {}): Promise<ServiceStatus[]> {
    return this.services.serviceStatus(names, options);
  }

  /**
   * Starts an ad-hoc supervised service (restarted like declared ones) and waits up to 60 s for
   * readiness. Rejects a name the guest YAML declares. An ad-hoc service of the same name is
   * replaced. Throws SERVICE_NOT_READY (the service keeps running) when it does not get ready.
   */
  startService(spec: AdHocServiceSpec, options: CallOptions = {}): Promise<ServiceStatus> {
    return this.services.startService(spec, options);
  }

  /** The last `lines` (default 100, at most 500) lines of a service log. */
  logs(service: string, options: CallOptions & { lines?: number } = {}): Promise<LogTail> {
    return this.services.logs(service, options);
  }

  /**
   * Follows a service log: without `cursor`, the last `lines` lines and a cursor at their end;
   * with one, only what was written after it (at most 64 KiB, `more` when more is waiting), across
   * the log's rotations and the service's restarts.
   */
  followLogs(service: string, options: CallOptions & { cursor?: string; lines?: number } = {}): Promise<LogFollowed> {
    return followLogThroughAgent(this.channel, service, options);
  }

  /**
   * What the setup run in progress (or the last one) wrote after `cursor`, from its start without
   * one: its step lines (`[pi-sandbox <time>] setup step i/n: <command>`) and the commands' output.
   */
  followSetup(options: CallOptions & { cursor?: string } = {}): Promise<SetupFollowed> {
    return followSetupThroughAgent(this.channel, options);
  }

  // -- setup and resume (runs.ts)

  /**
   * Runs setup: the commands, then an executable `<workspace>/.agents/setup`, under one deadline
   * (20 min). Afterwards every process the run left behind is stopped, detached ones included.
   * A failing step is reported in the result (`ok: false`), not thrown.
   */
  runSetup(options: SetupOptions = {}): Promise<SetupResult> {
    return runSetupThroughAgent(this.channel, options, async (signal) => (await this.tryGuestConfig(signal))?.setup);
  }

  /**
   * Runs resume: the commands, then an executable `<workspace>/.agents/resume`. Waits up to
   * `waitMs` (10 s); if still running it continues in the background and the result carries a
   * handle for execStatus/execKill.
   */
  runResume(options: ResumeOptions = {}): Promise<ResumeResult> {
    return runResumeThroughAgent(this.channel, options, async (signal) => (await this.tryGuestConfig(signal))?.resume);
  }

  // -- lifecycle

  /**
   * Asks the agent to stop its services and commands and exit, then ends the channel (bounded:
   * the exec is killed after 20 s). Idempotent.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      await this.channel.shutdown(20_000);
      if (!this.channel.exitStatus) this.stopChannel.abort(new Error("supervisor closed"));
    })();
    return this.closing;
  }

  /**
   * Ends this client's channel WITHOUT asking the agent to exit: the agent daemon keeps its
   * services and exec handles running, and the next {@link SupervisorClient.start} in the guest
   * reattaches to them (e.g. after the VM was suspended and resumed). Bounded: the bridge exec is
   * killed after 5 s. Later calls fail with AGENT_CLOSED. Idempotent, and a no-op after close().
   */
  detach(): Promise<void> {
    this.closing ??= (async () => {
      await this.channel.detach(5_000);
      if (!this.channel.exitStatus) this.stopChannel.abort(new Error("supervisor detached"));
    })();
    return this.closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
