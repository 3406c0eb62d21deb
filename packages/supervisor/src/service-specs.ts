// Turns the guest config's services into the agent's service specs, with preview origins resolved.
import {
  hasPreview,
  isConfigError,
  resolvePublicUrlReferences,
  type HealthCheck,
  type SandboxConfig,
  type ServiceConfig,
} from "@pi-sandbox/config";
import type { ServiceFailure } from "./types.js";

/** A service spec as the agent receives it: every reference resolved, `PORT` left to the agent. */
export interface AgentServiceSpec {
  name: string;
  command: string;
  cwd?: string;
  port?: number;
  env: Record<string, string>;
  health: HealthCheck;
  timeoutMs: number;
  publicUrl?: string;
  adhoc?: boolean;
}

/** Preview origins by service name (`http://127.0.0.1:<port>`), as chosen by the host. */
export type PreviewOrigins = Readonly<Record<string, string>>;

/** Services of the config that run on the (Linux) guest, in start order. */
export function guestServices(config: SandboxConfig): ServiceConfig[] {
  return config.serviceOrder
    .map((name) => config.services[name])
    .filter((service): service is ServiceConfig => service !== undefined && service.platforms.includes("linux"));
}

/**
 * Turns declared services into agent specs: `${services.X.publicURL}` resolved from the preview
 * origins, `PUBLIC_URL` set where the service has a preview and the host gave it an origin. A
 * service whose reference cannot be resolved becomes a failure instead of a spec.
 */
export function buildServiceSpecs(
  services: readonly ServiceConfig[],
  previewOrigins: PreviewOrigins,
): { specs: AgentServiceSpec[]; failures: ServiceFailure[] } {
  const specs: AgentServiceSpec[] = [];
  const failures: ServiceFailure[] = [];
  for (const service of services) {
    let env: Record<string, string>;
    try {
      env = resolvePublicUrlReferences(service.env, previewOrigins);
    } catch (error) {
      if (!isConfigError(error)) throw error;
      failures.push({
        service: service.name,
        code: "SERVICE_REFERENCE_UNRESOLVED",
        message: `service ${service.name} was not started: ${error.message}`,
        ...(error.hint ? { hint: error.hint } : {}),
      });
      continue;
    }
    const origin = Object.hasOwn(previewOrigins, service.name) ? previewOrigins[service.name] : undefined;
    specs.push({
      name: service.name,
      command: service.command,
      cwd: service.cwd,
      ...(service.port === undefined ? {} : { port: service.port }),
      env,
      health: service.health,
      timeoutMs: service.timeoutMs,
      ...(hasPreview(service) && origin !== undefined ? { publicUrl: origin } : {}),
    });
  }
  return { specs, failures };
}
