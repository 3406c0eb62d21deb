// What each agent reply may hold, checked against what the host asked for. A reply that does not
// fit throws BadReply (the channel then closes with AGENT_PROTOCOL); output beyond the host's caps
// is cut here too, not only in the guest.
import { LIMITS, isValidServiceName } from "@pi-sandbox/config";
import {
  BadReply,
  boolean,
  capText,
  integer,
  list,
  message,
  namesFrom,
  nullableText,
  oneOf,
  optionalInteger,
  optionalText,
  record,
  text,
} from "./reply-checks.js";
import type { RawStatus } from "./service-status.js";
import type {
  AgentActivity,
  AgentDoor,
  AgentHello,
  ExecResult,
  LogTail,
  RunStep,
  ServiceExit,
  ServiceFailure,
} from "./types.js";

const HANDLE = /^[A-Za-z0-9_-]{1,64}$/;

/** The agent's hello facts (event and ping reply). */
export function parseHello(raw: unknown): AgentHello {
  const r = record(raw, "hello");
  return {
    protocol: integer(r.protocol, "hello.protocol"),
    version: text(r.version, "hello.version", 64),
    pid: integer(r.pid, "hello.pid", 1),
    python: text(r.python, "hello.python", 64),
    stateDir: text(r.stateDir, "hello.stateDir"),
    workspace: text(r.workspace, "hello.workspace"),
    shell: text(r.shell, "hello.shell"),
    cleanup: text(r.cleanup, "hello.cleanup", 64),
    warmShell: boolean(r.warmShell, "hello.warmShell"),
    sessions: r.sessions === undefined ? 0 : integer(r.sessions, "hello.sessions", 0),
    boot: r.boot === undefined ? false : boolean(r.boot, "hello.boot"),
    ...(r.attach === undefined ? {} : { door: parseDoor(r.attach) }),
  };
}

const DOOR_TOKEN = /^[0-9a-f]{32}$/;

function parseDoor(raw: unknown): AgentDoor {
  const r = record(raw, "hello.attach");
  const port = integer(r.port, "hello.attach.port", 1, 65535);
  const token = text(r.token, "hello.attach.token", 32);
  if (!DOOR_TOKEN.test(token)) throw new BadReply("hello.attach.token", "is not 32 hex digits");
  return { port, token };
}

/**
 * A door as a hello gives it, from a copy kept elsewhere (the controller's `agent-door.json`):
 * the same checks, undefined when `raw` is not one.
 */
export function agentDoorOf(raw: unknown): AgentDoor | undefined {
  try {
    return parseDoor(raw);
  } catch (error) {
    if (error instanceof BadReply) return undefined;
    throw error;
  }
}

/**
 * The activity fields of a ping reply; undefined from an agent too old to send them (a guest
 * resumed from memory saved before they existed).
 */
export function parseActivity(raw: unknown): AgentActivity | undefined {
  const r = record(raw, "ping");
  if (r.runningJobs === undefined) return undefined;
  const runningJobs = integer(r.runningJobs, "ping.runningJobs", 0);
  const jobsIdleMs = optionalInteger(r.jobsIdleMs, "ping.jobsIdleMs");
  return jobsIdleMs === undefined ? { runningJobs } : { runningJobs, jobsIdleMs };
}

/** The agent's answer to the host's hello: the protocol it accepted, and whether it applied the hello's identity. */
export function parseHelloAck(expected: number) {
  return (raw: unknown): { identityApplied: boolean } => {
    const result = record(raw, "result");
    integer(result.protocol, "result.protocol", expected, expected);
    // Only the literal true counts: a guest's claim decides nothing on the host but whether the
    // identity exec is spared, and any other value (an older agent sends none) keeps that exec.
    return { identityApplied: result.identity === true };
  };
}

function handle(value: unknown, what: string, expected?: string): string {
  const h = text(value, what, 64);
  if (!HANDLE.test(h)) throw new BadReply(what, "is not a handle");
  if (expected !== undefined && h !== expected) throw new BadReply(what, `is ${h}, not the ${expected} asked about`);
  return h;
}

/** An exec-family reply (exec, exec-status, run-resume) with output capped on the host. */
export type CheckedExec = ExecResult & { steps?: RunStep[] };

/** Checks an exec reply; `expectHandle` for exec-status, `keep: "tail"` for setup output. */
export function parseExec(
  raw: unknown,
  options: { expectHandle?: string; keep?: "tail" | "head-tail"; commands?: readonly string[] } = {},
): CheckedExec & Record<string, unknown> {
  const r = record(raw, "result");
  const running = boolean(r.running, "result.running");
  const exitCode = optionalInteger(r.exitCode, "result.exitCode", 0, 255);
  if (!running && exitCode === undefined) throw new BadReply("result.exitCode", "is missing for a finished command");
  if (typeof r.output !== "string") throw new BadReply("result.output", "is not a string");
  const capped = capText(r.output, LIMITS.outputMaxBytes, options.keep ?? "head-tail");
  const result: CheckedExec & Record<string, unknown> = {
    handle: handle(r.handle, "result.handle", options.expectHandle),
    running,
    ...(exitCode === undefined ? {} : { exitCode }),
    ...(r.signal === undefined ? {} : { signal: text(r.signal, "result.signal", 32) }),
    output: capped.text,
    truncatedBytes: integer(r.truncatedBytes, "result.truncatedBytes") + capped.omittedBytes,
    ...(r.durationMs === undefined ? {} : { durationMs: integer(r.durationMs, "result.durationMs") }),
  };
  if (r.stderr !== undefined) {
    // Only an exec that asked for stderr apart carries it: capped like the output.
    if (typeof r.stderr !== "string") throw new BadReply("result.stderr", "is not a string");
    const err = capText(r.stderr, LIMITS.outputMaxBytes, options.keep ?? "head-tail", "stderr");
    result.stderr = err.text;
    result.stderrTruncatedBytes = integer(r.stderrTruncatedBytes, "result.stderrTruncatedBytes") + err.omittedBytes;
  }
  if (options.commands) result.steps = parseSteps(r.steps, options.commands);
  return result;
}

/** Steps of a setup/resume run: at most one per command plus the hook, commands echoed as sent. */
export function parseSteps(raw: unknown, commands: readonly string[]): RunStep[] {
  return list(raw, "result.steps", commands.length + 1).map((item, i) => {
    const what = `result.steps[${i}]`;
    const s = record(item, what);
    const command = text(s.command, `${what}.command`, LIMITS.yamlMaxBytes);
    if (i < commands.length && command !== commands[i])
      throw new BadReply(`${what}.command`, "is not the command sent");
    return {
      command,
      exitCode: integer(s.exitCode, `${what}.exitCode`, 0, 255),
      ...(s.signal === undefined ? {} : { signal: text(s.signal, `${what}.signal`, 32) }),
      ...(s.durationMs === undefined ? {} : { durationMs: integer(s.durationMs, `${what}.durationMs`) }),
      ...(s.error === undefined ? {} : { error: message(s.error, `${what}.error`) }),
    };
  });
}

/** The rest of a setup reply beyond the exec fields. */
export function parseSetupExtras(raw: unknown) {
  const r = record(raw, "result");
  const cleanup = record(r.cleanup, "result.cleanup");
  return {
    ok: boolean(r.ok, "result.ok"),
    timedOut: boolean(r.timedOut, "result.timedOut"),
    logPath: text(r.logPath, "result.logPath"),
    cleanup: {
      method: text(cleanup.method, "result.cleanup.method", 64),
      stopped: integer(cleanup.stopped, "cleanup"),
    },
  };
}

/** An exec-kill reply for `expectHandle`. */
export function parseKill(raw: unknown, expectHandle: string) {
  const r = record(raw, "result");
  return {
    handle: handle(r.handle, "result.handle", expectHandle),
    killed: boolean(r.killed, "result.killed"),
    running: boolean(r.running, "result.running"),
    exitCode: optionalInteger(r.exitCode, "result.exitCode", 0, 255),
    signal: optionalText(r.signal, "result.signal", 32),
  };
}

/** A logs reply: the service asked about, at most `lines` lines, text capped on the host. */
export function parseLogs(raw: unknown, service: string, lines: number): LogTail {
  const r = record(raw, "result");
  if (text(r.service, "result.service", 64) !== service)
    throw new BadReply("result.service", "is not the service asked about");
  if (typeof r.text !== "string") throw new BadReply("result.text", "is not a string");
  let body = r.text;
  let omitted = 0;
  // One more line than asked may be the agent's marker of what it left out.
  const parts = body.split("\n");
  if (parts.length - 1 > lines + 1) {
    const kept = parts.slice(-(lines + 1)).join("\n");
    omitted += Buffer.byteLength(body) - Buffer.byteLength(kept);
    body = kept;
  }
  const capped = capText(body, LIMITS.outputMaxBytes, "tail", "log");
  return {
    service,
    text: capped.text,
    lines: integer(r.lines, "result.lines", 0, lines),
    truncatedBytes: integer(r.truncatedBytes, "result.truncatedBytes") + omitted + capped.omittedBytes,
    logPath: text(r.logPath, "result.logPath"),
  };
}

// -- services

const AGENT_STATES = ["running", "restarting", "stopping", "stopped"] as const;

function serviceExit(raw: unknown, what: string): ServiceExit | null {
  if (raw === null) return null;
  const e = record(raw, what);
  return {
    exitCode: integer(e.exitCode, `${what}.exitCode`, 0, 255),
    ...(e.signal === undefined ? {} : { signal: text(e.signal, `${what}.signal`, 32) }),
    at: text(e.at, `${what}.at`, 64),
    ...(e.error === undefined ? {} : { error: message(e.error, `${what}.error`) }),
  };
}

/** One service status; its name must be one the host sent to this agent. */
export function parseStatus(raw: unknown, what: string, known: ReadonlySet<string>): RawStatus {
  const s = record(raw, what);
  const name = text(s.name, `${what}.name`, 64);
  if (!known.has(name))
    throw new BadReply(`${what}.name`, `is ${JSON.stringify(name)}, a service never sent to the agent`);
  const readiness = record(s.readiness, `${what}.readiness`);
  const health = record(s.health, `${what}.health`);
  const kind = oneOf(health.kind, `${what}.health.kind`, ["tcp", "http", "process"] as const);
  return {
    name,
    state: oneOf(s.state, `${what}.state`, AGENT_STATES),
    pid: s.pid === null ? null : integer(s.pid, `${what}.pid`, 1),
    port: s.port === null ? null : integer(s.port, `${what}.port`, 1, 65535),
    restarts: integer(s.restarts, `${what}.restarts`),
    lastExit: serviceExit(s.lastExit, `${what}.lastExit`),
    readiness: {
      state: oneOf(readiness.state, `${what}.readiness.state`, ["pending", "ready", "failed"] as const),
      error: readiness.error === null ? null : message(readiness.error, `${what}.readiness.error`),
      readyAt: nullableText(readiness.readyAt, `${what}.readiness.readyAt`, 64),
    },
    startedAt: nullableText(s.startedAt, `${what}.startedAt`, 64),
    command: text(s.command, `${what}.command`, LIMITS.yamlMaxBytes),
    cwd: text(s.cwd, `${what}.cwd`),
    health: kind === "http" ? { kind, path: text(health.path, `${what}.health.path`) } : { kind },
    adhoc: boolean(s.adhoc, `${what}.adhoc`),
    logPath: nullableText(s.logPath, `${what}.logPath`),
  } as RawStatus;
}

/** A list of service statuses: distinct names, each one the host sent to this agent. */
export function parseStatuses(raw: unknown, what: string, known: ReadonlySet<string>): RawStatus[] {
  const statuses = list(raw, what, known.size).map((item, i) => parseStatus(item, `${what}[${i}]`, known));
  if (new Set(statuses.map((s) => s.name)).size !== statuses.length) throw new BadReply(what, "lists a service twice");
  return statuses;
}

/** Readiness failures, each for one of the services asked about. */
export function parseFailures(raw: unknown, asked: ReadonlySet<string>): ServiceFailure[] {
  return list(raw, "result.failures", asked.size).map((item, i) => {
    const what = `result.failures[${i}]`;
    const f = record(item, what);
    const service = text(f.service, `${what}.service`, 64);
    if (!asked.has(service) || !isValidServiceName(service))
      throw new BadReply(`${what}.service`, "was not asked about");
    return {
      service,
      code: oneOf(f.code, `${what}.code`, ["SERVICE_NOT_READY"] as const),
      message: message(f.message, `${what}.message`),
      ...(f.logPath === undefined ? {} : { logPath: text(f.logPath, `${what}.logPath`) }),
    };
  });
}

/** A service-ensure reply for the specs sent. */
export function parseEnsure(raw: unknown, asked: ReadonlySet<string>, known: ReadonlySet<string>) {
  const r = record(raw, "result");
  const started = namesFrom(r.started, "result.started", asked);
  const kept = namesFrom(r.kept, "result.kept", asked);
  if (started.some((name) => kept.includes(name))) throw new BadReply("result.kept", "repeats a started service");
  return {
    started,
    kept,
    failures: parseFailures(r.failures, asked),
    services: parseStatuses(r.services, "result.services", known),
  };
}

/** A service-restart reply for the services named. */
export function parseRestart(raw: unknown, asked: ReadonlySet<string>, known: ReadonlySet<string>) {
  const r = record(raw, "result");
  return {
    restarted: namesFrom(r.restarted, "result.restarted", asked),
    failures: parseFailures(r.failures, asked),
    services: parseStatuses(r.services, "result.services", known),
  };
}

/** A service-stop reply: it stopped only services asked about (all known ones without names). */
export function parseStop(raw: unknown, asked: ReadonlySet<string>, known: ReadonlySet<string>) {
  const r = record(raw, "result");
  return {
    stopped: namesFrom(r.stopped, "result.stopped", asked),
    services: parseStatuses(r.services, "result.services", known),
  };
}

/** A service-start reply for the one ad-hoc service sent. */
export function parseStart(raw: unknown, name: string, known: ReadonlySet<string>) {
  const r = record(raw, "result");
  const service = parseStatus(r.service, "result.service", known);
  if (service.name !== name) throw new BadReply("result.service.name", "is not the service started");
  return { service, failures: parseFailures(r.failures, new Set([name])) };
}
