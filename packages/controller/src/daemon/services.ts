// Operations on a running guest: services with their previews, ad-hoc previews, the terminal.

import { LIMITS, hasPreview, referencedServices, type SandboxConfig, type ServiceConfig } from "@pi-sandbox/config";
import {
  adHocPreview,
  type PreviewGateway,
  type PreviewInfo,
  type PreviewLink,
  type PreviewSpec,
} from "@pi-sandbox/ingress";
import { ControllerError } from "../errors.js";
import { isSupervisorError, type ServicesResult } from "@pi-sandbox/supervisor";
import { runInGuest } from "@pi-sandbox/vm";
import { readRecord, type PreviewLinkInfo } from "../state/records.js";
import type { ProgressEvent } from "../wire.js";
import type { GuestActions, ServicesView } from "./context.js";
import { GUEST_SECRETS_PROFILE, resolveSecrets, secretsProfile } from "./secrets.js";
import { toControllerError, type InstanceState } from "./state.js";
import { previewsToReopen } from "./suspend.js";

type Progress = (event: ProgressEvent) => void;

function linksOf(service: ServiceConfig): PreviewLink[] {
  const links: PreviewLink[] = [];
  if (service.preview) links.push({ ...service.preview });
  for (const entry of service.previews) {
    if (entry.kind === "link") {
      const { kind: _kind, ...link } = entry;
      links.push(link);
    } else for (const link of entry.links) links.push({ ...link, folder: entry.folder });
  }
  return links;
}

/** The named services and every service whose public URL their env refers to. */
function withReferences(config: SandboxConfig, names: readonly string[]): Set<string> {
  const touched = new Set(names);
  for (const name of names) {
    const service = Object.hasOwn(config.services, name) ? config.services[name] : undefined;
    for (const referenced of service ? referencedServices(service.env) : []) touched.add(referenced);
  }
  return touched;
}

/**
 * Opens (or updates) a preview, refusing a new one past LIMITS.previewsMax: each preview is a
 * host listener, and the services that ask for them come from a guest file.
 */
async function openLimited(gateway: PreviewGateway, spec: PreviewSpec): Promise<PreviewInfo> {
  if (!gateway.get(spec.key) && gateway.list().length >= LIMITS.previewsMax) {
    throw new ControllerError(
      "CONTROLLER_PREVIEW_LIMIT",
      `${spec.key} gets no preview: this instance already has ${LIMITS.previewsMax} previews, the most one instance may hold`,
      {
        hint: "Remove preview: from services that do not need one (in the guest .sandbox.yaml), then run services ensure.",
        details: { key: spec.key, limit: LIMITS.previewsMax },
      },
    );
  }
  return gateway.open(spec);
}

function previewInfoToLinks(info: PreviewInfo): PreviewLinkInfo[] {
  return info.links.map((l) => {
    const out: PreviewLinkInfo = { service: info.key, url: l.url, title: l.title };
    if (l.description !== undefined) out.description = l.description;
    if (l.folder !== undefined) out.folder = l.folder;
    return out;
  });
}

/** A recorded link as a preview spec's link: a path on the (same, leased) origin, or external. */
function toPreviewLink(info: PreviewLinkInfo): PreviewLink {
  const url = new URL(info.url);
  const local = url.hostname === "127.0.0.1" || url.hostname === "localhost";
  const link: PreviewLink = { url: local ? `${url.pathname}${url.search}${url.hash}` : info.url, title: info.title };
  if (info.description !== undefined) link.description = info.description;
  if (info.folder !== undefined) link.folder = info.folder;
  return link;
}

/** The guest operations of one instance. */
export class GuestOperations implements GuestActions {
  /** The links each declared service's preview was opened with in this run. */
  private readonly declaredLinks = new Map<string, PreviewLink[]>();

  constructor(private readonly state: InstanceState) {}

  supervisor() {
    return this.state.running().supervisor;
  }

  ensureServices(names?: readonly string[]): Promise<ServicesView> {
    return this.withPreviews(this.ensure(() => undefined, names, false));
  }

  restartServices(names?: readonly string[]): Promise<ServicesView> {
    return this.withPreviews(this.ensure(() => undefined, names, true));
  }

  stopServices(names?: readonly string[]): Promise<ServicesResult> {
    return this.state.running().supervisor.stopServices(names);
  }

  async serviceStatus(names?: readonly string[]) {
    const services = await this.state.running().supervisor.serviceStatus(names);
    return { services, previews: this.state.status.previews ?? [] };
  }

  /** Services at boot: failures go to progress as well as to inspect's errors. */
  async ensureWithProgress(progress: Progress): Promise<void> {
    await this.ensure(progress, undefined, false);
  }

  /**
   * Opens previews for the previewed services acted on (every one without names, else the named
   * ones and those whose public URL they refer to), then ensures (or restarts) services with their
   * origins. Other services and their previews are left alone.
   */
  private async ensure(
    progress: Progress,
    names: readonly string[] | undefined,
    restart: boolean,
  ): Promise<ServicesResult> {
    const { supervisor, gateway } = this.state.running();
    let config: SandboxConfig | undefined;
    try {
      config = await supervisor.readGuestConfig();
    } catch (error) {
      if (!isSupervisorError(error, "SUPERVISOR_GUEST_CONFIG_NOT_FOUND")) {
        const e = toControllerError(error);
        this.state.recordError(
          e.code,
          `guest .sandbox.yaml: ${e.message}`,
          "Fix the guest file with write, then run services ensure.",
        );
        await this.state.setState(this.state.status.state).catch(() => undefined);
        throw error;
      }
    }
    const touched = names && config ? withReferences(config, names) : undefined;
    const origins: Record<string, string> = {};
    const wanted = new Map<string, PreviewSpec>();
    for (const name of config?.serviceOrder ?? []) {
      const service = config!.services[name]!;
      if (!hasPreview(service)) continue;
      const current = gateway.get(name);
      if (touched && !touched.has(name)) {
        if (current) origins[name] = current.origin;
        continue;
      }
      // A referenced service's preview that is already open only lends its origin.
      if (current && touched && !names!.includes(name)) {
        origins[name] = current.origin;
        continue;
      }
      // A restart keeps the links a preview already has; ensure takes up new preview configuration.
      const links = (restart && this.declaredLinks.get(name)) || linksOf(service);
      this.declaredLinks.set(name, links);
      // The guest port is known once the agent allocates it; until then the preview points at a
      // placeholder port and is updated right after the services start.
      const spec: PreviewSpec = {
        key: name,
        guestPort: service.port ?? current?.guestPort ?? 1,
        links,
      };
      try {
        const info = await openLimited(gateway, spec);
        origins[name] = info.origin;
        wanted.set(name, spec);
      } catch (error) {
        const e = toControllerError(error);
        this.state.recordError(e.code, e.message, e.hint);
        progress({ stage: "preview", message: `${name}: ${e.message}` });
      }
    }
    const result = restart
      ? await supervisor.restartServices(names, { previewOrigins: origins })
      : await supervisor.ensureServices(names, { previewOrigins: origins });
    for (const status of result.services) {
      const spec = wanted.get(status.name);
      if (spec && status.port && status.port !== spec.guestPort)
        await openLimited(gateway, { ...spec, guestPort: status.port });
    }
    for (const failure of result.failures) {
      this.state.recordError(
        failure.code,
        failure.message,
        failure.logPath
          ? `See {"action":"logs","name":"${this.state.name}","service":"${failure.service}"}.`
          : undefined,
      );
      progress({ stage: "services", message: failure.message });
    }
    await this.savePreviews();
    return result;
  }

  /**
   * After a warm start (ensure reopened the declared services' previews): reopens the other
   * previews of the suspended run, an ad-hoc port's or an ad-hoc service's, on their leased ports.
   * One that cannot be reopened is reported and left closed.
   */
  async reopenPreviews(recorded: readonly PreviewLinkInfo[], progress: Progress): Promise<void> {
    const { supervisor, gateway } = this.state.running();
    const missing = previewsToReopen(recorded, new Set(gateway.list().map((info) => info.key)));
    if (missing.size === 0) return;
    const services = await supervisor.serviceStatus();
    for (const [key, links] of missing) {
      const adHocPort = /^port-(\d+)$/.exec(key)?.[1];
      const guestPort = adHocPort ? Number(adHocPort) : services.find((s) => s.name === key && s.state === "running")?.port;
      if (!guestPort) continue;
      try {
        await openLimited(gateway, { key, guestPort, links: links.map(toPreviewLink) });
      } catch (error) {
        const e = toControllerError(error);
        this.state.recordError(e.code, e.message, e.hint);
        progress({ stage: "preview", message: `${key}: ${e.message}` });
      }
    }
    await this.savePreviews();
  }

  async startService(
    spec: Parameters<GuestActions["startService"]>[0],
    preview: Parameters<GuestActions["startService"]>[1],
  ) {
    const { supervisor, gateway } = this.state.running();
    let origin: string | undefined;
    if (preview) {
      const info = await openLimited(gateway, { key: spec.name, guestPort: spec.port ?? 1, links: preview.links });
      origin = info.origin;
    }
    const status = await supervisor.startService({ ...spec, ...(origin ? { publicUrl: origin } : {}) });
    if (preview && status.port)
      await openLimited(gateway, { key: spec.name, guestPort: status.port, links: preview.links });
    await this.savePreviews();
    return { service: status, previews: (this.state.status.previews ?? []).filter((p) => p.service === spec.name) };
  }

  async openPreview(spec: { port: number; title?: string; description?: string }) {
    const info = await openLimited(this.state.running().gateway, adHocPreview(spec));
    await this.savePreviews();
    return { previews: previewInfoToLinks(info) };
  }

  async shell(user: string) {
    const { vm } = this.state.running();
    const access = await vm.enableSsh({ user });
    // ssh starts sessions with a fresh environment: their login shell reads the placeholders
    // from /etc/profile.d instead (exec, services and hooks have them from the VM itself).
    const record = await readRecord(this.state.layout, this.state.kind, this.state.name);
    if (record?.secretSalt && Object.keys(record.config.network.secrets ?? {}).length > 0) {
      const written = await runInGuest(
        vm,
        ["/bin/sh", "-c", `umask 022 && mkdir -p /etc/profile.d && cat > ${GUEST_SECRETS_PROFILE}`],
        {
          stdin: secretsProfile(record.config, record.secretSalt),
        },
      );
      if (written.exitCode !== 0)
        this.state.log.warn(`writing ${GUEST_SECRETS_PROFILE} failed: exit ${written.exitCode}`);
    }
    return { command: access.command, user: access.user, port: access.port };
  }

  async reloadSecrets() {
    const { vm } = this.state.running();
    const record = await readRecord(this.state.layout, this.state.kind, this.state.name);
    const secrets =
      record?.secretSalt !== undefined ? await resolveSecrets(record.config, { salt: record.secretSalt }) : {};
    for (const [name, secret] of Object.entries(secrets)) vm.updateSecret(name, secret.value);
    this.state.log.info(`secrets read again: ${Object.keys(secrets).join(", ") || "none"}`);
    return { secrets: Object.entries(secrets).map(([name, secret]) => ({ name, hosts: [...secret.hosts] })) };
  }

  private async withPreviews<T extends object>(work: Promise<T>): Promise<T & { previews: PreviewLinkInfo[] }> {
    const result = await work;
    return { ...result, previews: this.state.status.previews ?? [] };
  }

  private async savePreviews(): Promise<void> {
    const gateway = this.state.gateway;
    if (gateway)
      await this.state.setState(this.state.status.state, { previews: gateway.list().flatMap(previewInfoToLinks) });
  }
}
