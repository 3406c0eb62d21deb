// The supervisor client's service calls over its channel, remembering which service names it
// sent to this agent.
import { LIMITS, isValidServiceName, type SandboxConfig } from "@pi-sandbox/config";
import type { AgentChannel } from "./channel.js";
import { SupervisorError, isSupervisorError } from "./errors.js";
import { type CallOptions, type ServiceOpOptions, REPLY_MARGIN_MS } from "./options.js";
import { parseEnsure, parseLogs, parseRestart, parseStart, parseStatuses, parseStop } from "./replies.js";
import { list, record, text } from "./reply-checks.js";
import { buildServiceSpecs, guestServices, type AgentServiceSpec } from "./service-specs.js";
import { mergeStatuses, readinessBudget } from "./service-status.js";
import type { AdHocServiceSpec, LogTail, ServiceFailure, ServiceStatus, ServicesResult } from "./types.js";

const SERVICE_STOP_BUDGET_MS = 10_000;

/** Where the service calls read the guest config from (the client). */
export interface GuestConfigSource {
  /** Guest path of the config. */
  readonly configPath: string;
  /** Reads and validates it; throws SUPERVISOR_GUEST_CONFIG_NOT_FOUND / SUPERVISOR_GUEST_CONFIG_INVALID. */
  read(options: CallOptions): Promise<SandboxConfig>;
  /** Reads it, or undefined when it is missing or invalid. */
  tryRead(signal: AbortSignal | undefined): Promise<SandboxConfig | undefined>;
}

/**
 * The service calls of {@link SupervisorClient}, over its channel. Remembers every service name it
 * sent to this agent: a fresh agent per client knows no others, so its listings may name no others.
 */
export class ServiceControl {
  private readonly serviceNames = new Set<string>();

  constructor(
    private readonly channel: AgentChannel,
    private readonly guest: GuestConfigSource,
  ) {}

  /**
   * Re-reads the guest YAML (unless the caller passes it) and starts every service that is not
   * running, explicitly stopped ones included, in start order; never replaces a live process.
   * With names, only those (each must be declared: SERVICE_NOT_FOUND otherwise). Waits for
   * readiness; services that fail it are listed in `failures` and keep running.
   */
  async ensureServices(names?: readonly string[], options: ServiceOpOptions = {}): Promise<ServicesResult> {
    const config = options.config ?? (await this.guest.read(options));
    const declared = guestServices(config);
    const only = names ? [...new Set(names)] : undefined;
    for (const name of only ?? [])
      if (!declared.some((s) => s.name === name))
        throw this.notFound(
          name,
          declared.map((s) => s.name),
          "ensure starts only declared services; check the name",
        );
    // Every declared spec goes to the agent, so a port it picks for one avoids the fixed ports of
    // the others; `only` says which of them to start.
    const built = buildServiceSpecs(declared, options.previewOrigins ?? {});
    const specs = only
      ? built.specs.filter((spec) => only.includes(spec.name) || spec.port !== undefined)
      : built.specs;
    const failures = only ? built.failures.filter((f) => only.includes(f.service)) : built.failures;
    this.sending(specs.map((spec) => spec.name));
    const asked = new Set(only ?? specs.map((spec) => spec.name));
    const starting = only?.filter((name) => specs.some((spec) => spec.name === name));
    const raw = await this.channel.request(
      "service-ensure",
      starting ? { services: specs, only: starting } : { services: specs },
      (result) => parseEnsure(result, asked, this.serviceNames),
      { signal: options.signal, timeoutMs: readinessBudget(specs.filter((spec) => asked.has(spec.name))) },
    );
    return {
      services: mergeStatuses(raw.services, config),
      started: raw.started,
      kept: raw.kept,
      stopped: [],
      failures: [...failures, ...raw.failures],
    };
  }

  /**
   * Stops and starts services again with command, cwd, env and health re-read from the guest
   * YAML (unless the caller passes it), keeping each one's port. Without names: every declared
   * service and every ad-hoc one.
   */
  async restartServices(names?: readonly string[], options: ServiceOpOptions = {}): Promise<ServicesResult> {
    let config = options.config;
    if (!config) {
      try {
        config = await this.guest.read(options);
      } catch (error) {
        if (!isSupervisorError(error, "SUPERVISOR_GUEST_CONFIG_NOT_FOUND")) throw error;
      }
    }
    const declared = config ? guestServices(config) : [];
    const known = (await this.agentStatus(undefined, options.signal)).services;
    const targets = names ?? [...declared.map((s) => s.name), ...known.filter((s) => s.adhoc).map((s) => s.name)];
    const items: (AgentServiceSpec | { name: string })[] = [];
    const failures: ServiceFailure[] = [];
    for (const name of targets) {
      const service = declared.find((s) => s.name === name);
      if (service) {
        const built = buildServiceSpecs([service], options.previewOrigins ?? {});
        items.push(...built.specs);
        failures.push(...built.failures);
      } else if (known.some((s) => s.name === name)) {
        items.push({ name });
      } else {
        throw this.notFound(
          name,
          declared.map((s) => s.name),
        );
      }
    }
    const asked = this.sending(items.map((item) => item.name));
    const raw = await this.channel.request(
      "service-restart",
      { services: items },
      (result) => parseRestart(result, asked, this.serviceNames),
      { signal: options.signal, timeoutMs: readinessBudget(items) + items.length * SERVICE_STOP_BUDGET_MS },
    );
    return {
      services: mergeStatuses(raw.services, config),
      started: raw.restarted,
      kept: [],
      stopped: [],
      failures: [...failures, ...raw.failures],
    };
  }

  /** Stops services (all without names); they stay stopped until ensure, restart or a reopen. */
  async stopServices(names?: readonly string[], options: CallOptions = {}): Promise<ServicesResult> {
    const config = await this.guest.tryRead(options.signal);
    if (names) {
      const declared = config ? guestServices(config).map((s) => s.name) : [];
      const known = (await this.agentStatus(undefined, options.signal)).services.map((s) => s.name);
      for (const name of names)
        if (!declared.includes(name) && !known.includes(name)) throw this.notFound(name, declared);
    }
    const asked = names ? new Set(names) : this.serviceNames;
    const raw = await this.channel.request(
      "service-stop",
      names ? { names } : {},
      (result) => parseStop(result, asked, this.serviceNames),
      { signal: options.signal, timeoutMs: SERVICE_STOP_BUDGET_MS + REPLY_MARGIN_MS },
    );
    return { services: mergeStatuses(raw.services, config), started: [], kept: [], stopped: raw.stopped, failures: [] };
  }

  /** State, pid, port, restarts, last exit and readiness of each service (all without names). */
  async serviceStatus(names?: readonly string[], options: CallOptions = {}): Promise<ServiceStatus[]> {
    const config = await this.guest.tryRead(options.signal);
    const all = mergeStatuses((await this.agentStatus(undefined, options.signal)).services, config);
    if (!names) return all;
    return names.map((name) => {
      const found = all.find((s) => s.name === name);
      if (!found) throw this.notFound(name, config ? guestServices(config).map((s) => s.name) : []);
      return found;
    });
  }

  /**
   * Starts an ad-hoc supervised service (restarted like declared ones) and waits up to 60 s for
   * readiness. Rejects a name the guest YAML declares. An ad-hoc service of the same name is
   * replaced. Throws SERVICE_NOT_READY (the service keeps running) when it does not get ready.
   */
  async startService(spec: AdHocServiceSpec, options: CallOptions = {}): Promise<ServiceStatus> {
    if (!isValidServiceName(spec.name)) {
      throw new SupervisorError(
        "INVALID_ARGUMENT",
        `service name ${JSON.stringify(spec.name)} is not valid: use 1-32 of a-z, 0-9 and -, starting with a letter or digit`,
        { details: { key: "name", value: spec.name } },
      );
    }
    const config = await this.guest.tryRead(options.signal);
    if (config && Object.hasOwn(config.services, spec.name)) {
      throw new SupervisorError("SERVICE_DECLARED", `service ${spec.name} is declared in ${this.guest.configPath}`, {
        hint: "use services restart for it, or pick another name",
        details: { service: spec.name },
      });
    }
    const agentSpec: AgentServiceSpec = {
      name: spec.name,
      command: spec.command,
      ...(spec.cwd === undefined ? {} : { cwd: spec.cwd }),
      ...(spec.port === undefined ? {} : { port: spec.port }),
      env: spec.env ?? {},
      health: spec.health ?? { kind: "tcp" },
      timeoutMs: LIMITS.adhocReadinessMs,
      ...(spec.publicUrl === undefined ? {} : { publicUrl: spec.publicUrl }),
      adhoc: true,
    };
    this.sending([spec.name]);
    const raw = await this.channel.request(
      "service-start",
      { service: agentSpec },
      (result) => parseStart(result, spec.name, this.serviceNames),
      { signal: options.signal, timeoutMs: LIMITS.adhocReadinessMs + SERVICE_STOP_BUDGET_MS + REPLY_MARGIN_MS },
    );
    const status = raw.service as ServiceStatus;
    const failure = raw.failures[0];
    if (failure) {
      throw new SupervisorError(failure.code, failure.message, {
        details: { service: spec.name, logPath: failure.logPath, status },
      });
    }
    return status;
  }

  /** The last `lines` (default 100, at most 500) lines of a service log. */
  async logs(service: string, options: CallOptions & { lines?: number } = {}): Promise<LogTail> {
    const lines = options.lines ?? LIMITS.logLinesDefault;
    if (!Number.isInteger(lines) || lines < 1 || lines > LIMITS.logLinesMax) {
      throw new SupervisorError("INVALID_ARGUMENT", `lines must be an integer from 1 to ${LIMITS.logLinesMax}`, {
        details: { key: "lines", value: lines },
      });
    }
    return this.channel.request("logs", { service, lines }, (result) => parseLogs(result, service, lines), {
      signal: options.signal,
      timeoutMs: REPLY_MARGIN_MS,
    });
  }

  private async agentStatus(names: readonly string[] | undefined, signal: AbortSignal | undefined) {
    return this.channel.request(
      "service-status",
      names ? { names } : {},
      (result) => ({
        services: parseStatuses(record(result, "result").services, "result.services", this.serviceNames),
      }),
      { signal, timeoutMs: REPLY_MARGIN_MS },
    );
  }

  /**
   * For a client attached to an agent that already ran (its hello's `sessions` > 0): the names of
   * the services that agent runs, which an earlier host process sent it, become names its replies
   * may list. Bounded like a guest YAML (`LIMITS.servicesMax` valid names).
   */
  async adoptRunning(signal: AbortSignal | undefined): Promise<void> {
    const names = await this.channel.request(
      "service-status",
      {},
      (result) =>
        list(record(result, "result").services, "result.services", LIMITS.servicesMax).map((item, i) =>
          text(record(item, `result.services[${i}]`).name, `result.services[${i}].name`, 64),
        ),
      { signal, timeoutMs: REPLY_MARGIN_MS },
    );
    for (const name of names) if (isValidServiceName(name)) this.serviceNames.add(name);
  }

  /** Records names about to be sent to the agent; returns them as the set a reply may name. */
  private sending(names: readonly string[]): ReadonlySet<string> {
    for (const name of names) this.serviceNames.add(name);
    return new Set(names);
  }

  private notFound(name: string, declared: readonly string[], why?: string): SupervisorError {
    const list = declared.length ? `declared: ${declared.join(", ")}` : "none are declared";
    return new SupervisorError(
      "SERVICE_NOT_FOUND",
      why
        ? `no service named ${name} is declared in ${this.guest.configPath} (${list})`
        : `no service named ${name} is declared in ${this.guest.configPath} or running (${list})`,
      { hint: why ?? "check the name", details: { service: name, declared } },
    );
  }
}
