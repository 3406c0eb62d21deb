// Service statuses from the agent: readiness budgets and merging raw statuses.
import { LIMITS, type SandboxConfig } from "@pi-sandbox/config";
import { guestServices, type AgentServiceSpec } from "./service-specs.js";
import type { ServiceStatus } from "./types.js";
import { REPLY_MARGIN_MS } from "./options.js";

/** A service status as the agent sends it (its `state` is a plain string on the wire). */
export type RawStatus = Omit<ServiceStatus, "state"> & { state: string };

/** How long a service request may take: the longest readiness deadline plus a reply margin. */
export function readinessBudget(specs: readonly (AgentServiceSpec | { name: string })[]): number {
  let longest: number = LIMITS.adhocReadinessMs;
  for (const spec of specs) if ("timeoutMs" in spec) longest = Math.max(longest, spec.timeoutMs);
  return longest + REPLY_MARGIN_MS;
}

/** Declared services in start order (not-started ones included), then every other live or ad-hoc service. */
export function mergeStatuses(raw: readonly RawStatus[], config: SandboxConfig | undefined): ServiceStatus[] {
  const byName = new Map(raw.map((s) => [s.name, s as ServiceStatus]));
  const result: ServiceStatus[] = [];
  if (config) {
    for (const service of guestServices(config)) {
      const live = byName.get(service.name);
      byName.delete(service.name);
      result.push(
        live ?? {
          name: service.name,
          state: "not-started",
          pid: null,
          port: service.port ?? null,
          restarts: 0,
          lastExit: null,
          readiness: { state: "pending", error: null, readyAt: null },
          startedAt: null,
          command: service.command,
          cwd: service.cwd,
          health: service.health,
          adhoc: false,
          logPath: null,
        },
      );
    }
  }
  // A stopped service the YAML no longer declares is history, not state: leave it out.
  for (const status of byName.values()) if (!config || status.adhoc || status.state !== "stopped") result.push(status);
  return result;
}
